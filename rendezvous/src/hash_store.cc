#include "collx/rendezvous/hash_store.h"

namespace collx::rendezvous {

struct HashStore::State {
  std::mutex mutex;
  std::condition_variable changed;
  std::map<std::string, Bytes, std::less<>> data;
};

HashStore::HashStore(const StoreOptions& options)
    : HashStore(Shared(), std::make_shared<State>(), options) {}

HashStore::HashStore(Shared, std::shared_ptr<State> state, const StoreOptions& options)
    : Store(options), state_(std::move(state)) {}

HashStore::~HashStore() = default;

std::unique_ptr<Store> HashStore::doReopen(const StoreOptions& options) const {
  return std::make_unique<HashStore>(Shared(), state_, options);
}

void HashStore::doSet(const std::string& key, const Bytes& value) {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->data[key] = value;
  }
  state_->changed.notify_all();
}

void HashStore::doMultiSet(const std::vector<std::string>& keys, const std::vector<Bytes>& values) {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    for (std::size_t i = 0; i < keys.size(); ++i) state_->data[keys[i]] = values[i];
  }
  state_->changed.notify_all();
}

std::vector<std::string> HashStore::waitLocked(std::unique_lock<std::mutex>& lock,
                                               const std::vector<std::string>& keys,
                                               Clock::time_point deadline) {
  auto missing = [&] {
    std::vector<std::string> out;
    for (const std::string& key : keys) {
      if (state_->data.find(key) == state_->data.end()) out.push_back(key);
    }
    return out;
  };
  std::vector<std::string> absent = missing();
  while (!absent.empty()) {
    if (state_->changed.wait_until(lock, deadline) == std::cv_status::timeout) return missing();
    absent = missing();
  }
  return absent;
}

std::vector<std::string> HashStore::doWait(const std::vector<std::string>& keys,
                                           Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(state_->mutex);
  return waitLocked(lock, keys, deadline);
}

std::vector<std::string> HashStore::doMultiGet(const std::vector<std::string>& keys,
                                               Clock::time_point deadline,
                                               std::vector<Bytes>& values) {
  std::unique_lock<std::mutex> lock(state_->mutex);
  std::vector<std::string> missing = waitLocked(lock, keys, deadline);
  if (!missing.empty()) return missing;
  values.clear();
  values.reserve(keys.size());
  for (const std::string& key : keys) values.push_back(state_->data.at(key));
  return missing;
}

std::int64_t HashStore::doAdd(const std::string& key, std::int64_t delta) {
  std::int64_t result;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    auto it = state_->data.find(key);
    result = detail::applyAdd(it == state_->data.end() ? nullptr : &it->second, delta, key,
                              where("add"));
    state_->data[key] = detail::formatCounter(result);
  }
  state_->changed.notify_all();
  return result;
}

Bytes HashStore::doCompareSet(const std::string& key, const Bytes& expected, const Bytes& desired) {
  Bytes result;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    auto it = state_->data.find(key);
    if (it == state_->data.end()) {
      if (!expected.empty()) return Bytes();
      state_->data[key] = desired;
      result = desired;
    } else if (it->second == expected) {
      it->second = desired;
      result = desired;
    } else {
      return it->second;
    }
  }
  state_->changed.notify_all();
  return result;
}

bool HashStore::doCheck(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  for (const std::string& key : keys) {
    if (state_->data.find(key) == state_->data.end()) return false;
  }
  return true;
}

bool HashStore::doErase(const std::string& key) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->data.erase(key) > 0;
}

}  // namespace collx::rendezvous
