// SignedStore: a store whose values carry a tag made with the job's secret, for stores that
// other clients can write (Redis, a shared directory, torch's stores). Every value is stored
// as "CLXV" | version 1 | HMAC-SHA256(secret's value key, key | value) | value, with the tag
// over the key as this store is given it (a PrefixStore above it gives the full key, job and
// generation included), so that a value can be neither forged nor moved to another key. A
// value without the right tag is an IoError naming the key, never returned.
//
// add() counters are passed through unsigned: a counter only says how many ranks have done
// something (left, opened a hang round), and signing one would cost a compare-and-set loop.
// get() of a counter is therefore refused like any unsigned value: add(key, 0) reads it.
// Whoever can write the inner store can still delete keys (availability is not protected).
#pragma once

#include <memory>

#include "collx/rendezvous/store.h"

namespace collx::rendezvous {

class SignedStore final : public Store {
 public:
  // `inner` and `secret` must not be null. The timeout and rank default to the inner store's.
  SignedStore(const std::shared_ptr<Store>& inner, std::shared_ptr<const secure::JobSecret> secret);
  SignedStore(std::shared_ptr<Store> inner, std::shared_ptr<const secure::JobSecret> secret,
              const StoreOptions& options);
  ~SignedStore() override;

  std::string describe() const override { return inner_->describe(); }
  bool authenticated() const override { return true; }
  const std::shared_ptr<Store>& inner() const noexcept { return inner_; }

  // `store` itself when it is authenticated or there is no secret, else `store` in a
  // SignedStore.
  static std::shared_ptr<Store> wrapIfNeeded(std::shared_ptr<Store> store,
                                             std::shared_ptr<const secure::JobSecret> secret);

  // The stored form of `value` under `key`, and back (nullopt: not signed with this secret).
  Bytes seal(const std::string& key, const Bytes& value) const;
  std::optional<Bytes> open(const std::string& key, const Bytes& stored) const;

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
  // open(), or an IoError naming the key.
  Bytes openOrThrow(const std::string& key, const Bytes& stored, std::string_view op) const;

  std::shared_ptr<Store> inner_;
  std::shared_ptr<const secure::JobSecret> secret_;
};

}  // namespace collx::rendezvous
