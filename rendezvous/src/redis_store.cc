// RedisStore: hiredis is the protocol (commands formatted by redisFormatCommandArgv, replies
// parsed by its reader); the connection is collx's own (sockio::Link: a plain socket, or TLS
// for rediss://, which hiredis 0.14 cannot do), with every wait bounded by the store's timeout.
#include "collx/rendezvous/redis_store.h"

#include <hiredis/hiredis.h>

#include "collx/base/log.h"
#include "collx/rendezvous/tcp_store.h"
#include "collx/secure/tls.h"
#include "socket_io.h"

namespace collx::rendezvous {

namespace {

// Every write gives its key the store's TTL in milliseconds (ARGV's last; "0": none).

// compareSet: KEYS[1] key, ARGV[1] expected, ARGV[2] desired. Returns the value afterwards.
constexpr const char* kCompareSetScript = R"lua(
local current = redis.call('GET', KEYS[1])
if (current == false and ARGV[1] == '') or current == ARGV[1] then
  if ARGV[3] == '0' then
    redis.call('SET', KEYS[1], ARGV[2])
  else
    redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  end
  return ARGV[2]
end
if current == false then return '' end
return current
)lua";

// multiSet: KEYS the keys, ARGV their values and the TTL.
constexpr const char* kMultiSetScript = R"lua(
local ttl = ARGV[#KEYS + 1]
for i, key in ipairs(KEYS) do
  if ttl == '0' then
    redis.call('SET', key, ARGV[i])
  else
    redis.call('SET', key, ARGV[i], 'PX', ttl)
  end
end
return 1
)lua";

// add: KEYS[1] key, ARGV[1] delta, ARGV[2] TTL. Returns the new value.
constexpr const char* kAddScript = R"lua(
local value = redis.call('INCRBY', KEYS[1], ARGV[1])
if ARGV[2] ~= '0' then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return value
)lua";

std::string_view view(const Bytes& bytes) {
  return std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

Bytes toBytes(const redisReply* reply) {
  const auto* p = reinterpret_cast<const std::uint8_t*>(reply->str);
  return Bytes(p, p + reply->len);
}

}  // namespace

struct RedisStore::Connection {
  Connection() : reader(redisReaderCreate()) {}
  ~Connection() {
    if (reader != nullptr) redisReaderFree(reader);
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  sockio::Link link;
  redisReader* reader;
};

class RedisStore::ReplyPtr {
 public:
  explicit ReplyPtr(redisReply* reply) : reply_(reply) {}
  ~ReplyPtr() {
    if (reply_ != nullptr) freeReplyObject(reply_);
  }
  ReplyPtr(ReplyPtr&& other) noexcept : reply_(other.reply_) { other.reply_ = nullptr; }
  ReplyPtr& operator=(ReplyPtr&&) = delete;
  const redisReply* operator->() const { return reply_; }
  const redisReply* get() const { return reply_; }

 private:
  redisReply* reply_;
};

RedisStore::RedisStore(std::string host, std::uint16_t port, int db, const StoreOptions& options,
                       Login login, std::shared_ptr<const secure::TlsContext> tls)
    : Store(options),
      host_(std::move(host)),
      port_(port),
      db_(db),
      login_(std::move(login)),
      tls_(std::move(tls)),
      ttl_(options.ttl ? *options.ttl : storeTtl(Config::process(), timeout())) {
  if (ttl_.count() < 0) {
    throw InvalidArgument(where("RedisStore"), "the TTL of its keys is negative");
  }
  std::lock_guard<std::mutex> lock(mutex_);
  connectLocked(Clock::now() + timeout(), "connect");
}

RedisStore::~RedisStore() = default;

std::unique_ptr<Store> RedisStore::doReopen(const StoreOptions& options) const {
  StoreOptions same = options;
  if (!same.ttl) same.ttl = ttl_;
  return std::make_unique<RedisStore>(host_, port_, db_, same, login_, tls_);
}

std::string RedisStore::describe() const {
  std::string url = tcpUrl(host_, port_).replace(0, 3, tls_ ? "rediss" : "redis");
  return db_ == 0 ? url : url + "/" + std::to_string(db_);
}

void RedisStore::connectLocked(Clock::time_point deadline, std::string_view op) {
  auto step = std::chrono::milliseconds(10);
  std::string lastError;
  while (true) {
    const int fd = sockio::connectTcp(host_, port_, deadline, lastError);
    if (fd >= 0) {
      auto connection = std::make_unique<Connection>();
      if (connection->reader == nullptr) throw IoError(where(op), "cannot allocate a Redis reader");
      connection->link = sockio::Link(fd);
      if (tls_) {
        const sockio::Outcome out = connection->link.startTls(tls_, host_, deadline);
        if (out.result != sockio::Result::kOk) {
          // A certificate does not get better by trying again.
          const std::string why = "TLS with Redis at " + describe() + " failed: " + out.describe() +
                                  " (TLS: " + tls_->describe() + ")";
          if (out.result == sockio::Result::kTimeout) throw TimeoutError(where(op), why);
          throw IoError(where(op), why);
        }
      }
      connection_ = std::move(connection);
      try {
        loginLocked(op);
      } catch (const IoError& e) {
        connection_.reset();
        if (!tls_ && e.detail().find("lost the connection") != std::string::npos) {
          throw IoError(where(op), e.detail() +
                                       " (a Redis that takes TLS only closes plain clients: "
                                       "rediss://)");
        }
        throw;
      } catch (...) {
        connection_.reset();
        throw;
      }
      return;
    }
    if (Clock::now() >= deadline) {
      throw TimeoutError(where(op), "could not connect within " +
                                        std::to_string(timeout().count()) +
                                        " ms (last error: " + lastError + ")");
    }
    COLLX_DEBUG(kRdzv, "store {}: connect failed ({}); retrying", describe(), lastError);
    detail::backoffSleep(step, deadline, std::chrono::milliseconds(500));
  }
}

void RedisStore::loginLocked(std::string_view op) {
  if (!login_.password.empty()) {
    // AUTH [user] password, before anything else. The reply names no password; neither does
    // describe().
    std::vector<std::string_view> auth{"AUTH"};
    if (!login_.user.empty()) auth.push_back(login_.user);
    auth.push_back(login_.password);
    ReplyPtr reply = exchangeLocked(op, auth);
    if (reply->type == REDIS_REPLY_ERROR) {
      throw IoError(where(op), "Redis at " + describe() + " refused the " +
                                   (login_.user.empty() ? "password" : "user and password") + " (" +
                                   std::string(reply->str, reply->len) + ")");
    }
  }
  // PING proves it is a Redis server (and that no password is missing); SELECT picks the
  // database.
  ReplyPtr pong = exchangeLocked(op, {"PING"});
  if (pong->type == REDIS_REPLY_ERROR &&
      std::string_view(pong->str, pong->len).starts_with("NOAUTH")) {
    throw IoError(where(op), "Redis at " + describe() +
                                 " asks for a password: redis://:password@host:port or "
                                 "redis://user:password@host:port");
  }
  if (pong->type != REDIS_REPLY_STATUS) {
    throw IoError(where(op), "what answers at " + describe() +
                                 " is not a Redis server (unexpected reply to PING)");
  }
  if (db_ != 0) {
    const std::string db = std::to_string(db_);
    ReplyPtr selected = exchangeLocked(op, {"SELECT", db});
    if (selected->type == REDIS_REPLY_ERROR) {
      throw IoError(where(op), "cannot select database " + db + ": " +
                                   std::string(selected->str, selected->len));
    }
  }
}

RedisStore::ReplyPtr RedisStore::exchangeLocked(std::string_view op,
                                                const std::vector<std::string_view>& argv) {
  std::vector<const char*> args;
  std::vector<std::size_t> lengths;
  for (std::string_view a : argv) {
    args.push_back(a.data());
    lengths.push_back(a.size());
  }
  char* formatted = nullptr;
  const int size = redisFormatCommandArgv(&formatted, static_cast<int>(args.size()), args.data(),
                                          lengths.data());
  if (size < 0 || formatted == nullptr) throw IoError(where(op), "cannot format a Redis command");
  struct Freed {
    char* p;
    ~Freed() { redisFreeCommand(p); }
  } freed{formatted};
  const auto deadline = Clock::now() + timeout();
  auto lost = [&](const sockio::Outcome& out, const char* phase) -> ReplyPtr {
    connection_.reset();
    if (out.result == sockio::Result::kTimeout) {
      throw TimeoutError(
          where(op), "Redis did not answer within " + std::to_string(timeout().count()) + " ms");
    }
    throw IoError(where(op),
                  std::string("lost the connection to Redis ") + phase + ": " + out.describe());
  };
  sockio::Link& link = connection_->link;
  sockio::Outcome out = link.sendAll(formatted, static_cast<std::size_t>(size), deadline);
  if (out.result != sockio::Result::kOk) return lost(out, "sending a command");
  redisReader* reader = connection_->reader;
  char buffer[16384];
  while (true) {
    void* reply = nullptr;
    if (redisReaderGetReply(reader, &reply) != REDIS_OK) {
      const std::string why = reader->errstr;
      connection_.reset();
      throw IoError(where(op),
                    "what answers at " + describe() + " broke the Redis protocol (" + why + ")");
    }
    if (reply != nullptr) return ReplyPtr(static_cast<redisReply*>(reply));
    std::size_t got = 0;
    out = link.recvSome(buffer, sizeof buffer, deadline, got);
    if (out.result != sockio::Result::kOk) return lost(out, "waiting for a reply");
    redisReaderFeed(reader, buffer, got);
  }
}

RedisStore::ReplyPtr RedisStore::command(std::string_view op,
                                         const std::vector<std::string_view>& argv) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!connection_) connectLocked(Clock::now() + timeout(), op);
  ReplyPtr reply = exchangeLocked(op, argv);
  if (reply->type == REDIS_REPLY_ERROR) {
    throw InvalidArgument(where(op),
                          "Redis refused the command: " + std::string(reply->str, reply->len));
  }
  return reply;
}

void RedisStore::doSet(const std::string& key, const Bytes& value) {
  if (ttl_.count() == 0) {
    command("set", {"SET", key, view(value)});
    return;
  }
  const std::string ttl = std::to_string(ttl_.count());
  command("set", {"SET", key, view(value), "PX", ttl});
}

void RedisStore::doMultiSet(const std::vector<std::string>& keys,
                            const std::vector<Bytes>& values) {
  const std::string count = std::to_string(keys.size());
  const std::string ttl = std::to_string(ttl_.count());
  std::vector<std::string_view> argv{"EVAL", kMultiSetScript, count};
  for (const std::string& key : keys) argv.push_back(key);
  for (const Bytes& value : values) argv.push_back(view(value));
  argv.push_back(ttl);
  command("multiSet", argv);
}

std::vector<std::string> RedisStore::doWait(const std::vector<std::string>& keys,
                                            Clock::time_point deadline) {
  return detail::pollForKeys(keys, deadline, [&](const std::string& key) {
    return command("wait", {"EXISTS", key})->integer != 0;
  });
}

std::vector<std::string> RedisStore::doMultiGet(const std::vector<std::string>& keys,
                                                Clock::time_point deadline,
                                                std::vector<Bytes>& values) {
  std::vector<std::string_view> argv{"MGET"};
  for (const std::string& key : keys) argv.push_back(key);
  auto step = std::chrono::milliseconds(1);
  while (true) {
    ReplyPtr reply = command("get", argv);
    std::vector<std::string> missing;
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != keys.size()) {
      throw IoError(where("get"), "unexpected reply to MGET");
    }
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (reply->element[i]->type == REDIS_REPLY_NIL) missing.push_back(keys[i]);
    }
    if (missing.empty()) {
      values.clear();
      for (std::size_t i = 0; i < keys.size(); ++i) values.push_back(toBytes(reply->element[i]));
      return missing;
    }
    if (Clock::now() >= deadline) return missing;
    detail::backoffSleep(step, deadline);
  }
}

std::int64_t RedisStore::doAdd(const std::string& key, std::int64_t delta) {
  const std::string amount = std::to_string(delta);
  const std::string ttl = std::to_string(ttl_.count());
  return command("add", {"EVAL", kAddScript, "1", key, amount, ttl})->integer;
}

Bytes RedisStore::doCompareSet(const std::string& key, const Bytes& expected,
                               const Bytes& desired) {
  const std::string ttl = std::to_string(ttl_.count());
  ReplyPtr reply = command(
      "compareSet", {"EVAL", kCompareSetScript, "1", key, view(expected), view(desired), ttl});
  return toBytes(reply.get());
}

bool RedisStore::doCheck(const std::vector<std::string>& keys) {
  std::vector<std::string_view> argv{"EXISTS"};
  for (const std::string& key : keys) argv.push_back(key);
  return command("check", argv)->integer == static_cast<long long>(keys.size());
}

bool RedisStore::doErase(const std::string& key) {
  return command("erase", {"DEL", key})->integer > 0;
}

}  // namespace collx::rendezvous
