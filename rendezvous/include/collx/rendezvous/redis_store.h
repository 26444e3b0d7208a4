// RedisStore: a Store in a Redis server (optional: built when hiredis is found), over TLS
// for rediss:// (COLLX_TLS_CA, else the system's CAs; COLLX_TLS_CERT and COLLX_TLS_KEY when
// the server asks clients for a certificate). Values are
// Redis strings that expire (COLLX_STORE_TTL); add(), compareSet() and multiSet() are Lua
// scripts, waiting polls with a short backoff (1..20 ms). Keys are used as given: share a server
// between jobs through PrefixStore (collx::init() does so with the job id).
#pragma once

#include <mutex>

#include "collx/rendezvous/store.h"

namespace collx::rendezvous {

class RedisStore final : public Store {
 public:
  // Redis' AUTH: a password, and a user (ACL) or none (the default user).
  struct Login {
    std::string user;
    std::string password;
  };
  // Connects (retrying until the timeout), in TLS when `tls` is given (rediss://: the
  // server's certificate is checked against its CA and for `host`), logs in when `login` has
  // a password and selects database `db`. Throws TimeoutError when nothing answers, IoError
  // when what answers is not a Redis server, fails TLS or refuses the login. Every key
  // written lives options.ttl (unset: COLLX_STORE_TTL).
  RedisStore(std::string host, std::uint16_t port, int db = 0, const StoreOptions& options = {},
             Login login = {}, std::shared_ptr<const secure::TlsContext> tls = nullptr);
  ~RedisStore() override;

  std::string describe() const override;

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
  struct Connection;
  class ReplyPtr;
  // Runs one command (argv form, binary-safe) and returns its reply; throws IoError on a
  // broken connection (the next command reconnects) and InvalidArgument on a Redis error.
  ReplyPtr command(std::string_view op, const std::vector<std::string_view>& argv);
  void connectLocked(Clock::time_point deadline, std::string_view op);
  // AUTH, PING and SELECT on a new connection.
  void loginLocked(std::string_view op);
  // Sends one command and reads its reply (a Redis error reply included), within the
  // timeout; a broken connection is dropped (the next command connects again).
  ReplyPtr exchangeLocked(std::string_view op, const std::vector<std::string_view>& argv);

  std::string host_;
  std::uint16_t port_;
  int db_;
  Login login_;
  std::shared_ptr<const secure::TlsContext> tls_;  // rediss://
  std::chrono::milliseconds ttl_;
  std::mutex mutex_;
  std::unique_ptr<Connection> connection_;
};

}  // namespace collx::rendezvous
