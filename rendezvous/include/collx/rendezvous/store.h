// The Store: a small key-value service through which ranks find each other.
//
// Keys are strings (1..kMaxKeyBytes bytes), values are bytes. Every method is thread-safe and
// every blocking method has a deadline: it throws TimeoutError naming the keys it waited for
// when the deadline passes. Implementations: HashStore (one process), FileStore (a shared
// directory), TcpStore (client of a TcpStoreServer), RedisStore (optional), PrefixStore (a
// namespace inside another store).
//
// The public methods are non-virtual: they validate arguments, measure deadlines and word
// the errors once for every store; an implementation overrides the protected hooks only.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "collx/base/error.h"
#include "collx/base/setting.h"

namespace collx::secure {
class JobSecret;
class TlsContext;
}  // namespace collx::secure

namespace collx::rendezvous {

using Bytes = std::vector<std::uint8_t>;
using Clock = std::chrono::steady_clock;

inline constexpr std::size_t kMaxKeyBytes = 4096;

Bytes toBytes(std::string_view text);
std::string toString(const Bytes& bytes);

// COLLX_TIMEOUT: the deadline of every blocking wait (store operations here; the bootstrap,
// connecting and collectives above). Declared in store.cc, the first layer that waits.
extern const Setting<kind::Duration> kTimeout;
// COLLX_STORE_TTL: how long a key written to a store that outlives jobs (Redis) lives.
extern const AutoSetting<kind::Duration> kStoreTtl;
// Its value in `config` for stores whose timeout is `timeout` (0: keys live for ever).
std::chrono::milliseconds storeTtl(const Config& config, std::chrono::milliseconds timeout);

struct StoreOptions {
  // Deadline of blocking calls made without an explicit timeout; unset means COLLX_TIMEOUT.
  std::optional<std::chrono::milliseconds> timeout;
  // The rank that uses this store, named in error messages (-1: not a rank).
  int rank = -1;
  // How long the keys this store writes live where the store supports it (Redis); unset means
  // COLLX_STORE_TTL, 0 for ever.
  std::optional<std::chrono::milliseconds> ttl;
  // The job's secret, which a TCP store client proves to its server (and the server to it);
  // nullptr: none (a server that asks for one refuses the client).
  std::shared_ptr<const secure::JobSecret> secret;
  // TLS to a TCP store (COLLX_TLS=1): the client's certificate and the CA that signed the
  // server's; nullptr: plain TCP. (rediss:// takes its TLS from COLLX_TLS_* itself.)
  std::shared_ptr<const secure::TlsContext> tls;
};

class Store {
 public:
  virtual ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Stores `value` under `key`, replacing any previous value, and wakes its waiters.
  void set(const std::string& key, const Bytes& value);
  void set(const std::string& key, std::string_view value) { set(key, toBytes(value)); }
  void multiSet(const std::vector<std::string>& keys, const std::vector<Bytes>& values);

  // Returns the value of `key`, waiting until it exists (blocking, bounded by the timeout).
  Bytes get(const std::string& key);
  Bytes get(const std::string& key, std::chrono::milliseconds timeout);
  std::vector<Bytes> multiGet(const std::vector<std::string>& keys);
  std::vector<Bytes> multiGet(const std::vector<std::string>& keys,
                              std::chrono::milliseconds timeout);

  // The value of `key` when it exists now (non-blocking), and the values of every key of
  // `keys` when all exist within `wait` (returning as soon as the last came); nullopt
  // otherwise, which is no error: for callers that wait in slices, looking at something else
  // between them. One request to a TCP store.
  std::optional<Bytes> tryGet(const std::string& key);
  std::optional<std::vector<Bytes>> tryMultiGet(const std::vector<std::string>& keys,
                                                std::chrono::milliseconds wait);

  // Blocks until every key exists.
  void wait(const std::vector<std::string>& keys);
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);

  // Atomically adds `delta` to the integer stored (as decimal text) under `key`, starting from
  // 0 when absent, and returns the new value. InvalidArgument if the value is not an integer.
  std::int64_t add(const std::string& key, std::int64_t delta);

  // Atomically: if `key` holds `expected` (or is absent and `expected` is empty), store
  // `desired`. Returns the value held afterwards (desired on success, the current one on
  // failure; empty when the key is absent and was not set).
  Bytes compareSet(const std::string& key, const Bytes& expected, const Bytes& desired);

  // Non-blocking: true when every key exists.
  bool check(const std::vector<std::string>& keys);
  // Non-blocking: the keys of `keys` that do not exist, in their order (one request to a TCP
  // store, whatever the number of keys).
  std::vector<std::string> missing(const std::vector<std::string>& keys);
  // Removes `key`; true if it existed.
  bool erase(const std::string& key);

  std::chrono::milliseconds timeout() const noexcept { return timeout_; }
  void setTimeout(std::chrono::milliseconds timeout);
  int rank() const noexcept { return rank_; }
  void setRank(int rank) noexcept { rank_ = rank; }

  // A description for messages and logs: "tcp://127.0.0.1:29500", "file:///tmp/x", ...
  virtual std::string describe() const = 0;

  // Whether only holders of the job's secret can write what this store's readers see: true
  // for a TCP store whose client and server proved the secret to each other and for a store
  // inside this process; false where other clients may write (Redis, a shared directory,
  // torch's stores), which a job with a secret wraps in a SignedStore.
  virtual bool authenticated() const { return false; }

  // A second, independent connection to the same store: what is set through either is seen
  // through the other, and neither's requests ever queue behind the other's (a TcpStore
  // serializes one client's requests). For a thread that must keep talking to the store while
  // another thread of its process is blocked in it, with a timeout of its own (the hang
  // report's watcher). `options` give the new store's timeout and rank; an unset timeout and
  // rank -1 take this store's. The new store does not depend on this one's lifetime.
  // Connecting is bounded by the new timeout and throws as the store's constructor does.
  // Returns nullptr when this store cannot be reopened (the default: adapters of stores collx
  // cannot duplicate, such as torch's c10d stores); callers then share this one.
  // Thread-safe.
  std::unique_ptr<Store> reopen(const StoreOptions& options = {}) const;

 protected:
  explicit Store(const StoreOptions& options);

  // The hooks. Keys are validated; deadlines are absolute. A wait hook returns the keys still
  // missing at its deadline (empty: all present) instead of throwing, so that every store
  // reports timeouts with the same words.
  virtual void doSet(const std::string& key, const Bytes& value) = 0;
  virtual void doMultiSet(const std::vector<std::string>& keys, const std::vector<Bytes>& values);
  virtual std::vector<std::string> doWait(const std::vector<std::string>& keys,
                                          Clock::time_point deadline) = 0;
  // Fills `values` (one per key) or returns the missing keys.
  virtual std::vector<std::string> doMultiGet(const std::vector<std::string>& keys,
                                              Clock::time_point deadline,
                                              std::vector<Bytes>& values) = 0;
  virtual std::int64_t doAdd(const std::string& key, std::int64_t delta) = 0;
  virtual Bytes doCompareSet(const std::string& key, const Bytes& expected,
                             const Bytes& desired) = 0;
  virtual bool doCheck(const std::vector<std::string>& keys) = 0;
  // The keys absent now. Default: doWait() with its deadline passed.
  virtual std::vector<std::string> doMissing(const std::vector<std::string>& keys);
  virtual bool doErase(const std::string& key) = 0;
  // reopen() with the options resolved (timeout set, rank chosen); nullptr: not supported.
  virtual std::unique_ptr<Store> doReopen(const StoreOptions& options) const;

  // Where an error happened, for implementations that throw IoError themselves.
  Where where(std::string_view op) const;

 private:
  void validateKey(const std::string& key, std::string_view op) const;
  void validateKeys(const std::vector<std::string>& keys, std::string_view op) const;
  [[noreturn]] void throwTimeout(std::string_view op, std::chrono::milliseconds timeout,
                                 const std::vector<std::string>& requested,
                                 const std::vector<std::string>& missing) const;

  std::chrono::milliseconds timeout_;
  int rank_;
};

// Helpers for implementations.
namespace detail {
// add() on a stored value (nullptr: absent): the new counter value. Throws InvalidArgument
// naming the key when the value is not a decimal integer or the sum overflows.
std::int64_t applyAdd(const Bytes* current, std::int64_t delta, const std::string& key,
                      const Where& where);
Bytes formatCounter(std::int64_t value);
// For stores that cannot be told when a key appears: polls `exists` for each missing key
// with a backoff until all exist or the deadline passes; returns the keys still missing.
std::vector<std::string> pollForKeys(const std::vector<std::string>& keys,
                                     Clock::time_point deadline,
                                     const std::function<bool(const std::string&)>& exists);
// Waits for `innerKeys` in `inner` (the same keys as `keys`, in another store's terms) until
// `deadline`, filling `values` when not null; returns the entries of `keys` still missing. For
// stores made of another store (PrefixStore, SignedStore).
std::vector<std::string> waitThrough(Store& inner, const std::vector<std::string>& innerKeys,
                                     const std::vector<std::string>& keys,
                                     Clock::time_point deadline, std::vector<Bytes>* values);
// Sleeps for the next step of a polling backoff (1 ms doubling to `max`), not past deadline.
void backoffSleep(std::chrono::milliseconds& step, Clock::time_point deadline,
                  std::chrono::milliseconds max = std::chrono::milliseconds(20));
}  // namespace detail

// A parsed store URL: tcp://host:port, tcp://[v6addr]:port, file:///absolute/dir,
// redis://[[user]:password@]host:port[/db] (user and password percent-encoded), hash://
// (in-process).
inline constexpr std::size_t kMaxStoreUrlBytes = 4096;
inline constexpr std::size_t kMaxStoreHostBytes = 253;  // a DNS name's limit

struct StoreUrl {
  std::string scheme;  // "tcp", "file", "redis", "rediss" (TLS), "hash"
  std::string host;    // tcp, redis (without brackets)
  std::uint16_t port = 0;
  std::string path;      // file
  int db = 0;            // redis
  std::string user;      // redis (decoded)
  std::string password;  // redis (decoded)
  // Throws InvalidArgument naming `url` (its first 200 bytes, control characters escaped, the
  // password hidden) and what is wrong with it: more than kMaxStoreUrlBytes, a control
  // character, a host beyond kMaxStoreHostBytes or of other characters than [A-Za-z0-9._-]
  // (or a bracketed IPv6 literal), a port outside 1..65535, ...
  static StoreUrl parse(const std::string& url);
  // The URL again, password included.
  std::string str() const;
};

// `url` with the password of its user information (scheme://user:password@...) replaced by
// "***": what error messages and logs show of a store URL.
std::string hidePassword(std::string_view url);

// Opens a store from a URL: tcp://host:port, file:///path, redis://host:port[/db]
// (hash:// is an in-process HashStore). InvalidArgument names a malformed URL; connecting
// is bounded by the timeout.
std::unique_ptr<Store> openStore(const std::string& url, const StoreOptions& options = {});

}  // namespace collx::rendezvous
