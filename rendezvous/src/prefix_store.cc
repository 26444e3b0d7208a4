#include "collx/rendezvous/prefix_store.h"

namespace collx::rendezvous {

namespace {
StoreOptions innerOptions(const std::shared_ptr<Store>& inner) {
  if (!inner) throw InvalidArgument(Where{-1, "PrefixStore", -1}, "the inner store is null");
  StoreOptions options;
  options.timeout = inner->timeout();
  options.rank = inner->rank();
  return options;
}
}  // namespace

PrefixStore::PrefixStore(std::string prefix, const std::shared_ptr<Store>& inner)
    : PrefixStore(std::move(prefix), inner, innerOptions(inner)) {}

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> inner,
                         const StoreOptions& options)
    : Store(options), prefix_(std::move(prefix)), inner_(std::move(inner)) {
  if (!inner_) throw InvalidArgument(Where{rank(), "PrefixStore", -1}, "the inner store is null");
  if (prefix_.empty())
    throw InvalidArgument(Where{rank(), "PrefixStore", -1}, "the prefix is empty");
}

std::string PrefixStore::describe() const { return inner_->describe() + " prefix " + prefix_; }

std::unique_ptr<Store> PrefixStore::doReopen(const StoreOptions& options) const {
  std::shared_ptr<Store> inner = inner_->reopen(options);
  if (!inner) return nullptr;
  return std::make_unique<PrefixStore>(prefix_, std::move(inner), options);
}

std::vector<std::string> PrefixStore::full(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const std::string& key : keys) out.push_back(full(key));
  return out;
}

void PrefixStore::doSet(const std::string& key, const Bytes& value) {
  inner_->set(full(key), value);
}

void PrefixStore::doMultiSet(const std::vector<std::string>& keys,
                             const std::vector<Bytes>& values) {
  inner_->multiSet(full(keys), values);
}

std::vector<std::string> PrefixStore::doWait(const std::vector<std::string>& keys,
                                             Clock::time_point deadline) {
  return detail::waitThrough(*inner_, full(keys), keys, deadline, nullptr);
}

std::vector<std::string> PrefixStore::doMultiGet(const std::vector<std::string>& keys,
                                                 Clock::time_point deadline,
                                                 std::vector<Bytes>& values) {
  return detail::waitThrough(*inner_, full(keys), keys, deadline, &values);
}

std::int64_t PrefixStore::doAdd(const std::string& key, std::int64_t delta) {
  return inner_->add(full(key), delta);
}

Bytes PrefixStore::doCompareSet(const std::string& key, const Bytes& expected,
                                const Bytes& desired) {
  return inner_->compareSet(full(key), expected, desired);
}

bool PrefixStore::doCheck(const std::vector<std::string>& keys) {
  return inner_->check(full(keys));
}

std::vector<std::string> PrefixStore::doMissing(const std::vector<std::string>& keys) {
  const std::vector<std::string> inner = inner_->missing(full(keys));
  std::vector<std::string> out;
  out.reserve(inner.size());
  const std::size_t cut = prefix_.size() + 1;
  for (const std::string& key : inner) out.push_back(key.substr(cut));
  return out;
}

bool PrefixStore::authenticated() const { return inner_->authenticated(); }

bool PrefixStore::doErase(const std::string& key) { return inner_->erase(full(key)); }

}  // namespace collx::rendezvous
