#include "collx/rendezvous/redis_store.h"

#include <hiredis/hiredis.h>

#include "collx/base/log.h"
#include "collx/rendezvous/tcp_store.h"

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

timeval toTimeval(std::chrono::milliseconds d) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(d.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((d.count() % 1000) * 1000);
  return tv;
}

std::string_view view(const Bytes& bytes) {
  return std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

Bytes toBytes(const redisReply* reply) {
  const auto* p = reinterpret_cast<const std::uint8_t*>(reply->str);
  return Bytes(p, p + reply->len);
}

}  // namespace

struct RedisStore::Connection {
  explicit Connection(redisContext* c) : context(c) {}
  ~Connection() {
    if (context != nullptr) redisFree(context);
  }
  redisContext* context;
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
                       Login login)
    : Store(options),
      host_(std::move(host)),
      port_(port),
      db_(db),
      login_(std::move(login)),
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
  return std::make_unique<RedisStore>(host_, port_, db_, same, login_);
}

std::string RedisStore::describe() const {
  std::string url = tcpUrl(host_, port_).replace(0, 3, "redis");
  return db_ == 0 ? url : url + "/" + std::to_string(db_);
}

void RedisStore::connectLocked(Clock::time_point deadline, std::string_view op) {
  auto step = std::chrono::milliseconds(10);
  std::string lastError;
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() < 1) left = std::chrono::milliseconds(1);
    auto connection = std::make_unique<Connection>(
        redisConnectWithTimeout(host_.c_str(), port_, toTimeval(left)));
    redisContext* c = connection->context;
    if (c == nullptr) throw IoError(where(op), "cannot allocate a Redis context");
    if (c->err == 0) {
      redisSetTimeout(c, toTimeval(timeout()));
      if (!login_.password.empty()) {
        // AUTH [user] password, before anything else.
        std::vector<const char*> args{"AUTH"};
        std::vector<std::size_t> lengths{4};
        if (!login_.user.empty()) {
          args.push_back(login_.user.c_str());
          lengths.push_back(login_.user.size());
        }
        args.push_back(login_.password.c_str());
        lengths.push_back(login_.password.size());
        ReplyPtr auth(static_cast<redisReply*>(
            redisCommandArgv(c, static_cast<int>(args.size()), args.data(), lengths.data())));
        if (auth.get() == nullptr || auth->type == REDIS_REPLY_ERROR) {
          // The reply names no password; neither does describe().
          throw IoError(
              where(op),
              "Redis at " + describe() + " refused the " +
                  (login_.user.empty() ? "password" : "user and password") + " (" +
                  (auth.get() ? std::string(auth->str, auth->len) : std::string(c->errstr)) + ")");
        }
      }
      // PING proves it is a Redis server (and that no password is missing); SELECT picks the
      // database.
      auto* pong = static_cast<redisReply*>(redisCommand(c, "PING"));
      ReplyPtr reply(pong);
      if (pong != nullptr && pong->type == REDIS_REPLY_ERROR &&
          std::string_view(pong->str, pong->len).starts_with("NOAUTH")) {
        throw IoError(where(op), "Redis at " + describe() +
                                     " asks for a password: redis://:password@host:port or "
                                     "redis://user:password@host:port");
      }
      if (pong == nullptr || pong->type != REDIS_REPLY_STATUS) {
        throw IoError(where(op), "what answers at " + describe() + " is not a Redis server (" +
                                     (c->err != 0 ? std::string(c->errstr) : "unexpected reply") +
                                     ")");
      }
      if (db_ != 0) {
        ReplyPtr selected(static_cast<redisReply*>(redisCommand(c, "SELECT %d", db_)));
        if (selected.get() == nullptr || selected->type == REDIS_REPLY_ERROR) {
          throw IoError(where(op), "cannot select database " + std::to_string(db_) + ": " +
                                       (selected.get() ? std::string(selected->str, selected->len)
                                                       : std::string(c->errstr)));
        }
      }
      connection_ = std::move(connection);
      return;
    }
    lastError = c->errstr;
    if (Clock::now() >= deadline) {
      throw TimeoutError(where(op), "could not connect within " +
                                        std::to_string(timeout().count()) +
                                        " ms (last error: " + lastError + ")");
    }
    COLLX_DEBUG(kRdzv, "store {}: connect failed ({}); retrying", describe(), lastError);
    detail::backoffSleep(step, deadline, std::chrono::milliseconds(500));
  }
}

RedisStore::ReplyPtr RedisStore::command(std::string_view op,
                                         const std::vector<std::string_view>& argv) {
  std::vector<const char*> args;
  std::vector<std::size_t> lengths;
  for (std::string_view a : argv) {
    args.push_back(a.data());
    lengths.push_back(a.size());
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (!connection_) connectLocked(Clock::now() + timeout(), op);
  redisContext* c = connection_->context;
  ReplyPtr reply(static_cast<redisReply*>(
      redisCommandArgv(c, static_cast<int>(args.size()), args.data(), lengths.data())));
  if (reply.get() == nullptr) {
    std::string why = c->errstr;
    bool timedOut = c->err == REDIS_ERR_IO && (errno == EAGAIN || errno == ETIMEDOUT);
    connection_.reset();
    if (timedOut) {
      throw TimeoutError(
          where(op), "Redis did not answer within " + std::to_string(timeout().count()) + " ms");
    }
    throw IoError(where(op), "lost the connection to Redis: " + why);
  }
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
