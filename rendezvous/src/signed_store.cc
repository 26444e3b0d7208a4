#include "collx/rendezvous/signed_store.h"

#include <cstring>

#include "collx/secure/job_secret.h"

namespace collx::rendezvous {

namespace {

constexpr std::uint8_t kMagic[4] = {'C', 'L', 'X', 'V'};
constexpr std::uint8_t kVersion = 1;
constexpr std::size_t kHeaderBytes = sizeof(kMagic) + 1 + sizeof(secure::Tag);

StoreOptions innerOptions(const std::shared_ptr<Store>& inner) {
  if (!inner) throw InvalidArgument(Where{-1, "SignedStore", -1}, "the inner store is null");
  StoreOptions options;
  options.timeout = inner->timeout();
  options.rank = inner->rank();
  return options;
}

}  // namespace

SignedStore::SignedStore(const std::shared_ptr<Store>& inner,
                         std::shared_ptr<const secure::JobSecret> secret)
    : SignedStore(inner, std::move(secret), innerOptions(inner)) {}

SignedStore::SignedStore(std::shared_ptr<Store> inner,
                         std::shared_ptr<const secure::JobSecret> secret,
                         const StoreOptions& options)
    : Store(options), inner_(std::move(inner)), secret_(std::move(secret)) {
  if (!inner_) throw InvalidArgument(Where{rank(), "SignedStore", -1}, "the inner store is null");
  if (!secret_) throw InvalidArgument(Where{rank(), "SignedStore", -1}, "the secret is null");
}

SignedStore::~SignedStore() = default;

std::shared_ptr<Store> SignedStore::wrapIfNeeded(std::shared_ptr<Store> store,
                                                 std::shared_ptr<const secure::JobSecret> secret) {
  if (!secret || !store || store->authenticated()) return store;
  return std::make_shared<SignedStore>(std::move(store), std::move(secret));
}

Bytes SignedStore::seal(const std::string& key, const Bytes& value) const {
  const secure::Tag tag =
      secret_->mac(secure::Purpose::kValue, {key, std::span<const std::uint8_t>(value)});
  Bytes out(kHeaderBytes + value.size());
  std::memcpy(out.data(), kMagic, sizeof(kMagic));
  out[sizeof(kMagic)] = kVersion;
  std::memcpy(out.data() + sizeof(kMagic) + 1, tag.data(), tag.size());
  if (!value.empty()) std::memcpy(out.data() + kHeaderBytes, value.data(), value.size());
  return out;
}

std::optional<Bytes> SignedStore::open(const std::string& key, const Bytes& stored) const {
  if (stored.size() < kHeaderBytes || std::memcmp(stored.data(), kMagic, sizeof(kMagic)) != 0 ||
      stored[sizeof(kMagic)] != kVersion) {
    return std::nullopt;
  }
  secure::Tag tag;
  std::memcpy(tag.data(), stored.data() + sizeof(kMagic) + 1, tag.size());
  const std::span<const std::uint8_t> value(stored.data() + kHeaderBytes,
                                            stored.size() - kHeaderBytes);
  if (!secret_->verify(secure::Purpose::kValue, {key, value}, tag)) return std::nullopt;
  return Bytes(value.begin(), value.end());
}

Bytes SignedStore::openOrThrow(const std::string& key, const Bytes& stored,
                               std::string_view op) const {
  std::optional<Bytes> value = open(key, stored);
  if (!value) {
    throw IoError(where(op), "the value of key '" + key + "' in " + inner_->describe() +
                                 " is not signed with this job's secret: another client of the "
                                 "store wrote it, or a rank of this job has another secret (" +
                                 secret_->origin() + " here)");
  }
  return std::move(*value);
}

void SignedStore::doSet(const std::string& key, const Bytes& value) {
  inner_->set(key, seal(key, value));
}

void SignedStore::doMultiSet(const std::vector<std::string>& keys,
                             const std::vector<Bytes>& values) {
  std::vector<Bytes> sealed;
  sealed.reserve(values.size());
  for (std::size_t i = 0; i < keys.size(); ++i) sealed.push_back(seal(keys[i], values[i]));
  inner_->multiSet(keys, sealed);
}

std::vector<std::string> SignedStore::doWait(const std::vector<std::string>& keys,
                                             Clock::time_point deadline) {
  return detail::waitThrough(*inner_, keys, keys, deadline, nullptr);
}

std::vector<std::string> SignedStore::doMultiGet(const std::vector<std::string>& keys,
                                                 Clock::time_point deadline,
                                                 std::vector<Bytes>& values) {
  std::vector<std::string> missing = detail::waitThrough(*inner_, keys, keys, deadline, &values);
  if (!missing.empty()) return missing;
  for (std::size_t i = 0; i < keys.size(); ++i) values[i] = openOrThrow(keys[i], values[i], "get");
  return missing;
}

std::int64_t SignedStore::doAdd(const std::string& key, std::int64_t delta) {
  return inner_->add(key, delta);
}

Bytes SignedStore::doCompareSet(const std::string& key, const Bytes& expected,
                                const Bytes& desired) {
  // HMAC is deterministic: the sealed expected value is byte for byte the stored one.
  Bytes held =
      inner_->compareSet(key, expected.empty() ? Bytes() : seal(key, expected), seal(key, desired));
  if (held.empty()) return held;
  return openOrThrow(key, held, "compareSet");
}

bool SignedStore::doCheck(const std::vector<std::string>& keys) { return inner_->check(keys); }

std::vector<std::string> SignedStore::doMissing(const std::vector<std::string>& keys) {
  return inner_->missing(keys);
}

bool SignedStore::doErase(const std::string& key) { return inner_->erase(key); }

std::unique_ptr<Store> SignedStore::doReopen(const StoreOptions& options) const {
  std::shared_ptr<Store> inner = inner_->reopen(options);
  if (!inner) return nullptr;
  return std::make_unique<SignedStore>(std::move(inner), secret_, options);
}

}  // namespace collx::rendezvous
