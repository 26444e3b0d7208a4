// HashStore: a Store in this process's memory, shared by every thread that holds it (ranks
// as threads in tests, single-process jobs) and by the stores reopen() makes of it (they share
// its map). Waiters block on a condition variable.
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>

#include "collx/rendezvous/store.h"

namespace collx::rendezvous {

class HashStore final : public Store {
  struct State;
  // Lets reopen() reach the constructor that shares a map, and nobody else.
  struct Shared {
    explicit Shared() = default;
  };

 public:
  explicit HashStore(const StoreOptions& options = {});
  HashStore(Shared, std::shared_ptr<State> state, const StoreOptions& options);
  ~HashStore() override;
  std::string describe() const override { return "hash://"; }
  bool authenticated() const override { return true; }  // inside this process

 protected:
  void doSet(const std::string& key, const Bytes& value) override;
  void doMultiSet(const std::vector<std::string>& keys, const std::vector<Bytes>& values) override;
  std::vector<std::string> doWait(const std::vector<std::string>& keys,
                                  Clock::time_point deadline) override;
  std::vector<std::string> doMultiGet(const std::vector<std::string>& keys,
                                      Clock::time_point deadline,
                                      std::vector<Bytes>& values) override;
  std::int64_t doAdd(const std::string& key, std::int64_t delta) override;
  Bytes doCompareSet(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  bool doCheck(const std::vector<std::string>& keys) override;
  bool doErase(const std::string& key) override;
  std::unique_ptr<Store> doReopen(const StoreOptions& options) const override;

 private:
  // Waits under `lock` until every key exists or the deadline; returns the missing keys.
  std::vector<std::string> waitLocked(std::unique_lock<std::mutex>& lock,
                                      const std::vector<std::string>& keys,
                                      Clock::time_point deadline);

  // The map and its lock, shared with the stores reopened from this one.
  std::shared_ptr<State> state_;
};

}  // namespace collx::rendezvous
