#include "collx/rendezvous/hash_store.h"

namespace collx::rendezvous {

HashStore::HashStore(const StoreOptions& options) : Store(options) {}

void HashStore::doSet(const std::string& key, const Bytes& value) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    data_[key] = value;
  }
  changed_.notify_all();
}

void HashStore::doMultiSet(const std::vector<std::string>& keys, const std::vector<Bytes>& values) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (std::size_t i = 0; i < keys.size(); ++i) data_[keys[i]] = values[i];
  }
  changed_.notify_all();
}

std::vector<std::string> HashStore::waitLocked(std::unique_lock<std::mutex>& lock,
                                               const std::vector<std::string>& keys,
                                               Clock::time_point deadline) {
  auto missing = [&] {
    std::vector<std::string> out;
    for (const std::string& key : keys) {
      if (data_.find(key) == data_.end()) out.push_back(key);
    }
    return out;
  };
  std::vector<std::string> absent = missing();
  while (!absent.empty()) {
    if (changed_.wait_until(lock, deadline) == std::cv_status::timeout) return missing();
    absent = missing();
  }
  return absent;
}

std::vector<std::string> HashStore::doWait(const std::vector<std::string>& keys,
                                           Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  return waitLocked(lock, keys, deadline);
}

std::vector<std::string> HashStore::doMultiGet(const std::vector<std::string>& keys,
                                               Clock::time_point deadline,
                                               std::vector<Bytes>& values) {
  std::unique_lock<std::mutex> lock(mutex_);
  std::vector<std::string> missing = waitLocked(lock, keys, deadline);
  if (!missing.empty()) return missing;
  values.clear();
  values.reserve(keys.size());
  for (const std::string& key : keys) values.push_back(data_.at(key));
  return missing;
}

std::int64_t HashStore::doAdd(const std::string& key, std::int64_t delta) {
  std::int64_t result;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = data_.find(key);
    result = detail::applyAdd(it == data_.end() ? nullptr : &it->second, delta, key, where("add"));
    data_[key] = detail::formatCounter(result);
  }
  changed_.notify_all();
  return result;
}

Bytes HashStore::doCompareSet(const std::string& key, const Bytes& expected, const Bytes& desired) {
  Bytes result;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = data_.find(key);
    if (it == data_.end()) {
      if (!expected.empty()) return Bytes();
      data_[key] = desired;
      result = desired;
    } else if (it->second == expected) {
      it->second = desired;
      result = desired;
    } else {
      return it->second;
    }
  }
  changed_.notify_all();
  return result;
}

bool HashStore::doCheck(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const std::string& key : keys) {
    if (data_.find(key) == data_.end()) return false;
  }
  return true;
}

bool HashStore::doErase(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  return data_.erase(key) > 0;
}

}  // namespace collx::rendezvous
