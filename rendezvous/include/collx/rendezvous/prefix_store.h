// PrefixStore: a namespace inside another store. Every key k becomes "<prefix>/k" in the
// inner store, so that jobs, generations and subsystems do not collide.
#pragma once

#include <memory>

#include "collx/rendezvous/store.h"

namespace collx::rendezvous {

class PrefixStore final : public Store {
 public:
  // `inner` must not be null. The timeout and rank default to the inner store's.
  PrefixStore(std::string prefix, const std::shared_ptr<Store>& inner);
  PrefixStore(std::string prefix, std::shared_ptr<Store> inner, const StoreOptions& options);

  std::string describe() const override;
  bool authenticated() const override;
  const std::string& prefix() const noexcept { return prefix_; }
  const std::shared_ptr<Store>& inner() const noexcept { return inner_; }

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
  std::vector<std::string> doMissing(const std::vector<std::string>& keys) override;
  bool doErase(const std::string& key) override;
  std::unique_ptr<Store> doReopen(const StoreOptions& options) const override;

 private:
  std::string full(const std::string& key) const { return prefix_ + "/" + key; }
  std::vector<std::string> full(const std::vector<std::string>& keys) const;

  std::string prefix_;
  std::shared_ptr<Store> inner_;
};

}  // namespace collx::rendezvous
