#include "collx/rendezvous/store.h"

#include <algorithm>
#include <charconv>
#include <set>
#include <thread>

namespace collx::rendezvous {

const Setting<kind::Duration> kTimeout(
    {.name = "COLLX_TIMEOUT",
     .component = "rendezvous",
     .defaultValue = std::chrono::seconds(300),
     .range = {std::chrono::milliseconds(1)},
     .help = "Deadline of every blocking wait: store operations, joining, connecting, "
             "collectives (e.g. 30s, 500ms, 2m; a plain number is seconds)."});

const AutoSetting<kind::Duration> kStoreTtl(
    {.name = "COLLX_STORE_TTL",
     .component = "rendezvous",
     .automatic = "twice COLLX_TIMEOUT plus 10 minutes",
     .range = {std::chrono::milliseconds(0)},
     .help = "How long a key a job writes to a Redis store lives, so that a killed job's keys "
             "expire (a job that ends erases its own). No key is read later than one "
             "COLLX_TIMEOUT after its last write. 0: for ever."});

std::chrono::milliseconds storeTtl(const Config& config, std::chrono::milliseconds timeout) {
  if (auto ttl = kStoreTtl.get(config)) return *ttl;
  return 2 * timeout + std::chrono::minutes(10);
}

Bytes toBytes(std::string_view text) { return Bytes(text.begin(), text.end()); }
std::string toString(const Bytes& bytes) { return std::string(bytes.begin(), bytes.end()); }

namespace {

std::string describeKeys(const std::vector<std::string>& keys) {
  constexpr std::size_t kShown = 8;
  std::string out = "[";
  for (std::size_t i = 0; i < keys.size() && i < kShown; ++i) {
    if (i > 0) out += ", ";
    out += keys[i];
  }
  if (keys.size() > kShown) out += ", ... " + std::to_string(keys.size() - kShown) + " more";
  return out + "]";
}

std::chrono::milliseconds resolveTimeout(const StoreOptions& options) {
  if (options.timeout) return *options.timeout;
  return kTimeout.get(Config::process());
}

}  // namespace

Store::Store(const StoreOptions& options) : timeout_(resolveTimeout(options)), rank_(options.rank) {
  if (timeout_.count() <= 0) {
    throw InvalidArgument(Where{rank_, "store", -1}, "timeout must be positive, got " +
                                                         std::to_string(timeout_.count()) + " ms");
  }
}

Store::~Store() = default;

std::unique_ptr<Store> Store::reopen(const StoreOptions& options) const {
  StoreOptions resolved = options;
  if (!resolved.timeout) resolved.timeout = timeout_;
  if (resolved.rank == -1) resolved.rank = rank_;
  return doReopen(resolved);
}

std::unique_ptr<Store> Store::doReopen(const StoreOptions& /*options*/) const { return nullptr; }

void Store::setTimeout(std::chrono::milliseconds timeout) {
  if (timeout.count() <= 0) {
    throw InvalidArgument(where("setTimeout"), "timeout must be positive, got " +
                                                   std::to_string(timeout.count()) + " ms");
  }
  timeout_ = timeout;
}

Where Store::where(std::string_view op) const {
  return Where{rank_, "store " + std::string(op) + " (" + describe() + ")", -1};
}

void Store::validateKey(const std::string& key, std::string_view op) const {
  if (key.empty()) throw InvalidArgument(where(op), "the key is empty");
  if (key.size() > kMaxKeyBytes) {
    throw InvalidArgument(where(op), "key of " + std::to_string(key.size()) +
                                         " bytes exceeds the limit of " +
                                         std::to_string(kMaxKeyBytes) + " bytes");
  }
}

void Store::validateKeys(const std::vector<std::string>& keys, std::string_view op) const {
  for (const std::string& key : keys) validateKey(key, op);
}

void Store::throwTimeout(std::string_view op, std::chrono::milliseconds timeout,
                         const std::vector<std::string>& requested,
                         const std::vector<std::string>& missing) const {
  std::string detail = "timed out after " + std::to_string(timeout.count()) + " ms waiting for " +
                       (missing.size() == 1 ? "key " : "keys ") + describeKeys(missing);
  if (missing.size() != requested.size()) {
    detail += " (" + std::to_string(missing.size()) + " of " + std::to_string(requested.size()) +
              " keys missing)";
  }
  throw TimeoutError(where(op), detail);
}

void Store::set(const std::string& key, const Bytes& value) {
  validateKey(key, "set");
  doSet(key, value);
}

void Store::multiSet(const std::vector<std::string>& keys, const std::vector<Bytes>& values) {
  validateKeys(keys, "multiSet");
  if (keys.size() != values.size()) {
    throw InvalidArgument(where("multiSet"), std::to_string(keys.size()) + " keys but " +
                                                 std::to_string(values.size()) + " values");
  }
  if (!keys.empty()) doMultiSet(keys, values);
}

void Store::doMultiSet(const std::vector<std::string>& keys, const std::vector<Bytes>& values) {
  for (std::size_t i = 0; i < keys.size(); ++i) doSet(keys[i], values[i]);
}

Bytes Store::get(const std::string& key) { return get(key, timeout_); }

Bytes Store::get(const std::string& key, std::chrono::milliseconds timeout) {
  validateKey(key, "get");
  std::vector<Bytes> values;
  std::vector<std::string> keys{key};
  std::vector<std::string> missing = doMultiGet(keys, Clock::now() + timeout, values);
  if (!missing.empty()) throwTimeout("get", timeout, keys, missing);
  return std::move(values.at(0));
}

std::optional<Bytes> Store::tryGet(const std::string& key) {
  auto values = tryMultiGet({key}, std::chrono::milliseconds(0));
  if (!values) return std::nullopt;
  return std::move(values->at(0));
}

std::optional<std::vector<Bytes>> Store::tryMultiGet(const std::vector<std::string>& keys,
                                                     std::chrono::milliseconds wait) {
  validateKeys(keys, "get");
  std::vector<Bytes> values;
  if (keys.empty()) return values;
  const auto deadline = Clock::now() + std::max(wait, std::chrono::milliseconds(0));
  if (!doMultiGet(keys, deadline, values).empty()) return std::nullopt;
  return values;
}

std::vector<Bytes> Store::multiGet(const std::vector<std::string>& keys) {
  return multiGet(keys, timeout_);
}

std::vector<Bytes> Store::multiGet(const std::vector<std::string>& keys,
                                   std::chrono::milliseconds timeout) {
  validateKeys(keys, "multiGet");
  std::vector<Bytes> values;
  if (keys.empty()) return values;
  std::vector<std::string> missing = doMultiGet(keys, Clock::now() + timeout, values);
  if (!missing.empty()) throwTimeout("multiGet", timeout, keys, missing);
  return values;
}

void Store::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void Store::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  validateKeys(keys, "wait");
  if (keys.empty()) return;
  std::vector<std::string> missing = doWait(keys, Clock::now() + timeout);
  if (!missing.empty()) throwTimeout("wait", timeout, keys, missing);
}

std::int64_t Store::add(const std::string& key, std::int64_t delta) {
  validateKey(key, "add");
  return doAdd(key, delta);
}

Bytes Store::compareSet(const std::string& key, const Bytes& expected, const Bytes& desired) {
  validateKey(key, "compareSet");
  return doCompareSet(key, expected, desired);
}

bool Store::check(const std::vector<std::string>& keys) {
  validateKeys(keys, "check");
  return keys.empty() || doCheck(keys);
}

std::vector<std::string> Store::missing(const std::vector<std::string>& keys) {
  validateKeys(keys, "missing");
  if (keys.empty()) return {};
  return doMissing(keys);
}

std::vector<std::string> Store::doMissing(const std::vector<std::string>& keys) {
  return doWait(keys, Clock::now());
}

bool Store::erase(const std::string& key) {
  validateKey(key, "erase");
  return doErase(key);
}

namespace detail {

std::int64_t applyAdd(const Bytes* current, std::int64_t delta, const std::string& key,
                      const Where& where) {
  std::int64_t result = 0;
  if (current != nullptr) {
    const Bytes& value = *current;
    const char* begin = reinterpret_cast<const char*>(value.data());
    const char* end = begin + value.size();
    auto [ptr, ec] = std::from_chars(begin, end, result);
    if (value.empty() || ec != std::errc() || ptr != end) {
      throw InvalidArgument(where, "add on key '" + key + "': its value (" +
                                       std::to_string(value.size()) +
                                       " bytes) is not a decimal integer");
    }
  }
  if (__builtin_add_overflow(result, delta, &result)) {
    throw InvalidArgument(where, "add on key '" + key + "': the counter would overflow");
  }
  return result;
}

Bytes formatCounter(std::int64_t value) { return toBytes(std::to_string(value)); }

std::vector<std::string> pollForKeys(const std::vector<std::string>& keys,
                                     Clock::time_point deadline,
                                     const std::function<bool(const std::string&)>& exists) {
  auto step = std::chrono::milliseconds(1);
  std::vector<std::string> missing = keys;
  while (true) {
    std::vector<std::string> still;
    for (const std::string& key : missing) {
      if (!exists(key)) still.push_back(key);
    }
    missing.swap(still);
    if (missing.empty() || Clock::now() >= deadline) return missing;
    backoffSleep(step, deadline);
  }
}

std::vector<std::string> waitThrough(Store& inner, const std::vector<std::string>& innerKeys,
                                     const std::vector<std::string>& keys,
                                     Clock::time_point deadline, std::vector<Bytes>* values) {
  // A deadline passed or nearer than a millisecond is one look, not a wait.
  const auto remaining =
      std::max(std::chrono::milliseconds(0),
               std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()));
  if (values != nullptr) {
    if (auto got = inner.tryMultiGet(innerKeys, remaining)) {
      *values = std::move(*got);
      return {};
    }
  } else if (remaining.count() > 0) {
    try {
      inner.wait(innerKeys, remaining);
      return {};
    } catch (const TimeoutError&) {
      // (which keys, below)
    }
  }
  // The missing keys in the outer store's terms, with one request (a request per key made a
  // wait of P keys that ran out cost P requests).
  const std::vector<std::string> absent = inner.missing(innerKeys);
  if (absent.empty()) {
    // Every key appeared just after the inner deadline: take them without waiting again.
    if (values == nullptr) return {};
    if (auto got = inner.tryMultiGet(innerKeys, std::chrono::milliseconds(0))) {
      *values = std::move(*got);
      return {};
    }
    return keys;
  }
  const std::set<std::string> gone(absent.begin(), absent.end());
  std::vector<std::string> missing;
  missing.reserve(absent.size());
  for (std::size_t i = 0; i < innerKeys.size(); ++i) {
    if (gone.count(innerKeys[i]) != 0) missing.push_back(keys[i]);
  }
  return missing;
}

void backoffSleep(std::chrono::milliseconds& step, Clock::time_point deadline,
                  std::chrono::milliseconds max) {
  auto now = Clock::now();
  if (now >= deadline) return;
  auto sleep = std::min<Clock::duration>(step, deadline - now);
  std::this_thread::sleep_for(sleep);
  step = std::min(step * 2, max);
}

}  // namespace detail

}  // namespace collx::rendezvous
