// A finished job leaves nothing in a shared store, a killed job's keys expire, and another
// client of the store can neither read a password off the job nor forge its keys: collx-run
// jobs against a real redis-server started here (read directly through hiredis), and contexts
// over a shared directory.
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>
#include <sys/stat.h>

#include <filesystem>
#include <map>
#include <thread>

#include "collx/collx.h"
#include "collx/rendezvous/signed_store.h"
#include "collx/secure/job_secret.h"
#include "util/test_util.h"
#include "util/tls_certs.h"

namespace collx {
namespace {

using namespace std::chrono_literals;
using test::RedisServer;

std::string launcher() { return test::binDir() + "/collx-run"; }
std::string worker() { return test::binDir() + "/collx-test-worker"; }

// A plain client of the Redis server, as another user of it would be.
class RedisClient {
 public:
  explicit RedisClient(int port, const std::string& password = "") {
    context_ = redisConnect("127.0.0.1", port);
    if (context_ == nullptr || context_->err != 0) throw std::runtime_error("cannot connect");
    if (!password.empty()) freeReplyObject(redisCommand(context_, "AUTH %s", password.c_str()));
  }
  ~RedisClient() { redisFree(context_); }
  std::vector<std::string> keys() {
    auto* reply = static_cast<redisReply*>(redisCommand(context_, "KEYS *"));
    std::vector<std::string> out;
    for (std::size_t i = 0; reply != nullptr && i < reply->elements; ++i) {
      out.emplace_back(reply->element[i]->str, reply->element[i]->len);
    }
    freeReplyObject(reply);
    return out;
  }
  long long pttl(const std::string& key) {
    auto* reply =
        static_cast<redisReply*>(redisCommand(context_, "PTTL %b", key.data(), key.size()));
    long long ttl = reply != nullptr ? reply->integer : -3;
    freeReplyObject(reply);
    return ttl;
  }
  void set(const std::string& key, const std::string& value) {
    freeReplyObject(
        redisCommand(context_, "SET %b %b", key.data(), key.size(), value.data(), value.size()));
  }

 private:
  redisContext* context_ = nullptr;
};

std::string joined(const std::vector<std::string>& keys) {
  std::string out;
  for (const auto& k : keys) out += k + "\n";
  return out;
}

#define REQUIRE_REDIS(server) \
  if (!(server).available()) GTEST_SKIP() << (server).whyUnavailable()

// collx-run -n 3 --store redis://... : the ranks' seven keys and collx-run's are gone at the end.
TEST(StoreCleanup, AFinishedJobLeavesNothingInRedis) {
  RedisServer server;
  REQUIRE_REDIS(server);
  const std::string url = "redis://127.0.0.1:" + std::to_string(server.port());
  for (const char* transport : {"auto", "tcp"}) {
    auto r = test::run({launcher(), "-n", "3", "--store", url, "--", worker(), "count", "1000"},
                       {{"COLLX_TRANSPORT", transport}}, 120s);
    ASSERT_EQ(r.code, 0) << r.err;
    RedisClient redis(server.port());
    EXPECT_EQ(joined(redis.keys()), "") << transport;
  }
}

// A job killed by collx-run's --timeout erases nothing: its keys expire on their own.
TEST(StoreCleanup, AKilledJobsKeysExpire) {
  RedisServer server;
  REQUIRE_REDIS(server);
  const std::string url = "redis://127.0.0.1:" + std::to_string(server.port());
  auto r = test::run(
      {launcher(), "-n", "2", "--timeout", "4s", "--store", url, "--", worker(), "hang", "64", "3"},
      {{"TEST_WORKER_HANG_RANK", "1"},
       {"TEST_WORKER_HANG_CASE", "sleep"},
       {"COLLX_STORE_TTL", "10m"}},
      120s);
  ASSERT_NE(r.code, 0) << r.err;
  RedisClient redis(server.port());
  const std::vector<std::string> keys = redis.keys();
  ASSERT_GE(keys.size(), 5u) << joined(keys);  // rank/0..1, transport/0..1, world_size
  for (const std::string& key : keys) {
    const long long ttl = redis.pttl(key);
    EXPECT_GT(ttl, 0) << key;
    EXPECT_LE(ttl, 600000) << key;
  }
}

// redis://:password@host works; a wrong or missing password is refused without showing it.
TEST(StoreCleanup, RedisPasswordInTheUrl) {
  RedisServer server({"--requirepass", "pass word%1"});
  REQUIRE_REDIS(server);
  const std::string host = "127.0.0.1:" + std::to_string(server.port());
  auto ok = test::run({launcher(), "-n", "2", "--store", "redis://:pass%20word%251@" + host, "--",
                       worker(), "count", "100"},
                      {}, 120s);
  EXPECT_EQ(ok.code, 0) << ok.err;
  auto wrong = test::run({launcher(), "-n", "2", "--timeout", "20s", "--store",
                          "redis://:not-the-one@" + host, "--", worker(), "count", "100"},
                         {}, 120s);
  EXPECT_NE(wrong.code, 0);
  EXPECT_NE(wrong.err.find("refused the password"), std::string::npos) << wrong.err;
  EXPECT_EQ(wrong.err.find("not-the-one"), std::string::npos) << wrong.err;
  auto none = test::run({launcher(), "-n", "2", "--timeout", "20s", "--store", "redis://" + host,
                         "--", worker(), "count", "100"},
                        {}, 120s);
  EXPECT_NE(none.code, 0);
  EXPECT_NE(none.err.find("asks for a password"), std::string::npos) << none.err;
  RedisClient redis(server.port(), "pass word%1");
  EXPECT_EQ(joined(redis.keys()), "");
  // collx-info shows the URL without its password.
  auto info = test::run({test::binDir() + "/collx-info"},
                        {{"COLLX_STORE", "redis://:pass%20word%251@" + host}}, 60s);
  EXPECT_NE(info.out.find("redis://:***@" + host), std::string::npos) << info.out;
  EXPECT_EQ(info.out.find("pass%20word"), std::string::npos) << info.out;
}

// Another client of the store writes a rank's record before the job: the job refuses it,
// naming the key, instead of connecting to what it names.
TEST(StoreCleanup, AForgedKeyFailsTheJobNamingIt) {
  RedisServer server;
  REQUIRE_REDIS(server);
  RedisClient redis(server.port());
  redis.set("collx/forged/0/rank/1", "evil-host boot 1 pid 1");
  auto r = test::run(
      {launcher(), "-n", "2", "--job-id", "forged", "--timeout", "30s", "--store",
       "redis://127.0.0.1:" + std::to_string(server.port()), "--", worker(), "count", "100"},
      {}, 120s);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("key 'collx/forged/0/rank/1'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("not signed with this job's secret"), std::string::npos) << r.err;
}

// rediss://: a job's ranks and collx-run reach Redis over TLS with the CA and certificate
// of COLLX_TLS_*, and leave nothing; a client without a certificate, one that does not trust
// the server's, and plain redis:// at the TLS port are refused with clear errors.
TEST(StoreCleanup, RedisOverTls) {
  test::TempDir dir;
  test::TlsCerts certs(dir.path() + "/pki");
  test::TlsCerts other(dir.path() + "/other", "other-ca");
  const secure::TlsFiles serverFiles = certs.issue("redis");
  const secure::TlsFiles client = certs.issue("client");
  const test::RedisTls tls{serverFiles.cert, serverFiles.key, serverFiles.ca, true};
  RedisServer server({}, &tls);
  REQUIRE_REDIS(server);
  const std::string url = "rediss://127.0.0.1:" + std::to_string(server.tlsPort());
  const std::map<std::string, std::string> env = {
      {"COLLX_TLS_CA", client.ca}, {"COLLX_TLS_CERT", client.cert}, {"COLLX_TLS_KEY", client.key}};
  auto ok = test::run({launcher(), "-n", "3", "--store", url, "--", worker(), "count", "1000"}, env,
                      120s);
  ASSERT_EQ(ok.code, 0) << ok.err;
  RedisClient redis(server.port());  // the plain port, as another user of the server
  EXPECT_EQ(joined(redis.keys()), "");

  auto failed = [&](const std::map<std::string, std::string>& with, const std::string& store) {
    auto r = test::run({launcher(), "-n", "2", "--timeout", "20s", "--store", store, "--", worker(),
                        "count", "100"},
                       with, 120s);
    EXPECT_NE(r.code, 0) << store;
    return r.err;
  };
  // No certificate, and Redis asks for one.
  std::string e = failed({{"COLLX_TLS_CA", client.ca}}, url);
  EXPECT_NE(e.find("it asks for this side's certificate, and none was shown (COLLX_TLS_CERT, "
                   "COLLX_TLS_KEY)"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find(url), std::string::npos) << e;
  // A CA that did not sign the server's certificate.
  e = failed({{"COLLX_TLS_CA", other.caFile()},
              {"COLLX_TLS_CERT", client.cert},
              {"COLLX_TLS_KEY", client.key}},
             url);
  EXPECT_NE(e.find("certificate verify failed"), std::string::npos) << e;
  // Plain Redis protocol at the TLS port.
  e = failed(env, "redis://127.0.0.1:" + std::to_string(server.tlsPort()));
  EXPECT_NE(e.find("redis://127.0.0.1:" + std::to_string(server.tlsPort())), std::string::npos)
      << e;
  EXPECT_NE(e.find("a Redis that takes TLS only closes plain clients: rediss://"),
            std::string::npos)
      << e;
  EXPECT_EQ(joined(redis.keys()), "");
}

// Contexts over a shared directory, with a secret: the directory is this user's only, and the
// last to leave erases every file of the job.
TEST(StoreCleanup, ADirectoryStoreIsPrivateAndEmptiedAtTheEnd) {
  test::TempDir dir;
  const std::string path = dir.path() + "/jobs";
  auto secret = secure::JobSecret::fromText("the secret of this test", "the test's");
  constexpr int kSize = 3;
  std::vector<std::thread> threads;
  std::vector<std::string> errors(kSize);
  for (int r = 0; r < kSize; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto store = std::make_shared<rendezvous::FileStore>(path);
        ContextOptions options;
        options.jobId = "files";
        options.secret = secret;
        options.timeout = 30s;
        auto ctx = Context::create(store, r, kSize, options);
        float x = 1;
        allreduce(*ctx, &x, &x, 1, DataType::kFloat32);
        if (x != kSize) errors[r] = "wrong sum " + std::to_string(x);
        // A value in the directory carries its tag: nothing readable is stored plain.
        auto raw = rendezvous::FileStore(path).get("collx/files/0/world_size", 1s);
        if (rendezvous::toString(raw) == std::to_string(kSize)) errors[r] = "unsigned value";
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < kSize; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  std::string left;
  for (const auto& entry : std::filesystem::directory_iterator(path)) {
    if (entry.path().filename() != ".lock") left += entry.path().filename().string() + "\n";
  }
  EXPECT_EQ(left, "");
}

}  // namespace
}  // namespace collx
