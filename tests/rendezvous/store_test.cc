// One suite for every Store: semantics, timeouts, concurrency, large and binary values, and
// waiters woken from another process. Parameterized over hash, file, tcp, prefix, redis and
// rediss (Redis over TLS).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <functional>
#include <numeric>
#include <random>
#include <thread>

#include "collx/rendezvous/file_store.h"
#include "collx/rendezvous/hash_store.h"
#include "collx/rendezvous/prefix_store.h"
#include "collx/rendezvous/signed_store.h"
#include "collx/rendezvous/tcp_store.h"
#include "collx/secure/job_secret.h"
#include "collx/secure/tls.h"
#include "collx_rendezvous_config.h"
#include "util/sanitizer.h"
#include "util/test_util.h"
#include "util/tls_certs.h"
#if COLLX_HAVE_REDIS
#include "collx/rendezvous/redis_store.h"
#endif

namespace collx::rendezvous {
namespace {

using namespace std::chrono_literals;
using test::RedisServer;
using test::TempDir;

// A store service and a way to make clients of it.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::shared_ptr<Store> client(const StoreOptions& options) = 0;
  // A URL another process can open, or "" when the store lives in this process only.
  virtual std::string url() const { return ""; }
  // Why this backend cannot run here ("" when it can).
  virtual std::string unavailable() const { return ""; }
};

class HashBackend : public Backend {
 public:
  std::shared_ptr<Store> client(const StoreOptions& options) override {
    if (!store_) store_ = std::make_shared<HashStore>(options);
    store_->setTimeout(options.timeout.value_or(store_->timeout()));
    return store_;
  }

 private:
  std::shared_ptr<HashStore> store_;
};

class FileBackend : public Backend {
 public:
  std::shared_ptr<Store> client(const StoreOptions& options) override {
    return std::make_shared<FileStore>(dir_.path() + "/store", options);
  }
  std::string url() const override { return "file://" + dir_.path() + "/store"; }

 private:
  TempDir dir_;
};

class TcpBackend : public Backend {
 public:
  std::shared_ptr<Store> client(const StoreOptions& options) override {
    return std::make_shared<TcpStore>("127.0.0.1", server_.port(), options);
  }
  std::string url() const override { return server_.url(); }

 private:
  TcpStoreServer server_;
};

// PrefixStore over a TCP store: namespacing must not change any semantics.
class PrefixBackend : public Backend {
 public:
  std::shared_ptr<Store> client(const StoreOptions& options) override {
    auto inner = std::make_shared<TcpStore>("127.0.0.1", server_.port(), options);
    return std::make_shared<PrefixStore>("job/7", inner, options);
  }

 private:
  TcpStoreServer server_;
};

std::shared_ptr<const secure::JobSecret> testSecret(
    std::string_view text = "a secret of this test") {
  return secure::JobSecret::fromText(text, "the test's");
}

// A store that others can write, with the job's values signed.
class SignedFileBackend : public Backend {
 public:
  std::shared_ptr<Store> client(const StoreOptions& options) override {
    return std::make_shared<SignedStore>(std::make_shared<FileStore>(dir_.path() + "/s", options),
                                         testSecret(), options);
  }

 private:
  TempDir dir_;
};

#if COLLX_HAVE_REDIS
class RedisBackend : public Backend {
 public:
  std::shared_ptr<Store> client(const StoreOptions& options) override {
    return std::make_shared<RedisStore>("127.0.0.1", static_cast<std::uint16_t>(server_.port()), 0,
                                        options);
  }
  std::string url() const override { return "redis://127.0.0.1:" + std::to_string(server_.port()); }
  std::string unavailable() const override {
    return server_.available() ? "" : server_.whyUnavailable();
  }

 private:
  RedisServer server_;
};

// rediss://: Redis over TLS, the server's certificate and the client's from one CA.
class RedissBackend : public Backend {
 public:
  RedissBackend()
      : certs_(dir_.path() + "/pki"),
        serverFiles_(certs_.issue("redis")),
        clientTls_(secure::TlsContext::fromFiles(certs_.issue("client"))),
        tls_{serverFiles_.cert, serverFiles_.key, serverFiles_.ca, true},
        server_({}, &tls_) {}
  std::shared_ptr<Store> client(const StoreOptions& options) override {
    return std::make_shared<RedisStore>("127.0.0.1", static_cast<std::uint16_t>(server_.tlsPort()),
                                        0, options, RedisStore::Login{}, clientTls_);
  }
  std::string unavailable() const override {
    return server_.available() ? "" : server_.whyUnavailable();
  }

 private:
  TempDir dir_;
  test::TlsCerts certs_;
  secure::TlsFiles serverFiles_;
  std::shared_ptr<const secure::TlsContext> clientTls_;
  test::RedisTls tls_;
  RedisServer server_;
};
#endif

struct Kind {
  std::string name;
  std::function<std::unique_ptr<Backend>()> make;
  bool crossProcess;  // other processes can open it by URL
};

void PrintTo(const Kind& kind, std::ostream* os) { *os << kind.name; }

std::vector<Kind> kinds() {
  std::vector<Kind> out = {
      {"hash", [] { return std::make_unique<HashBackend>(); }, false},
      {"file", [] { return std::make_unique<FileBackend>(); }, true},
      {"tcp", [] { return std::make_unique<TcpBackend>(); }, true},
      {"prefix", [] { return std::make_unique<PrefixBackend>(); }, false},
      {"signed", [] { return std::make_unique<SignedFileBackend>(); }, false},
  };
#if COLLX_HAVE_REDIS
  out.push_back({"redis", [] { return std::make_unique<RedisBackend>(); }, true});
  out.push_back({"rediss", [] { return std::make_unique<RedissBackend>(); }, false});
#endif
  return out;
}

std::vector<Kind> crossProcessKinds() {
  std::vector<Kind> out;
  for (const Kind& kind : kinds()) {
    if (kind.crossProcess) out.push_back(kind);
  }
  return out;
}

class StoreTest : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    backend_ = GetParam().make();
    if (!backend_->unavailable().empty()) GTEST_SKIP() << backend_->unavailable();
  }
  std::shared_ptr<Store> client(std::chrono::milliseconds timeout = 10s, int rank = -1) {
    StoreOptions options;
    options.timeout = timeout;
    options.rank = rank;
    return backend_->client(options);
  }
  std::unique_ptr<Backend> backend_;
};

TEST_P(StoreTest, SetGetOverwrite) {
  auto store = client();
  store->set("alpha", "one");
  EXPECT_EQ(toString(store->get("alpha")), "one");
  store->set("alpha", "two");
  EXPECT_EQ(toString(store->get("alpha")), "two");
  // A second client sees the same data.
  auto other = client();
  EXPECT_EQ(toString(other->get("alpha")), "two");
}

TEST_P(StoreTest, GetTimesOutNamingTheKeyAndRank) {
  auto store = client(10s, 5);
  auto start = Clock::now();
  try {
    store->get("never-set", 200ms);
    FAIL() << "get of a missing key returned";
  } catch (const TimeoutError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("never-set"), std::string::npos) << what;
    EXPECT_NE(what.find("rank 5"), std::string::npos) << what;
    EXPECT_NE(what.find("timed out after 200 ms"), std::string::npos) << what;
    EXPECT_EQ(e.rank(), 5);
  }
  auto elapsed = Clock::now() - start;
  EXPECT_GE(elapsed, 190ms);
  EXPECT_LT(elapsed, 5s);
}

TEST_P(StoreTest, WaitReportsOnlyMissingKeys) {
  auto store = client();
  store->set("present", "x");
  try {
    store->wait({"present", "absent"}, 150ms);
    FAIL() << "wait returned with a key missing";
  } catch (const TimeoutError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("absent"), std::string::npos) << what;
    EXPECT_EQ(what.find("present"), std::string::npos) << what;
    EXPECT_NE(what.find("1 of 2 keys missing"), std::string::npos) << what;
  }
}

TEST_P(StoreTest, WaitIsWokenBySetFromAnotherThread) {
  auto store = client();
  auto setter = client();
  std::thread t([&] {
    std::this_thread::sleep_for(50ms);
    setter->set("k1", "1");
    std::this_thread::sleep_for(20ms);
    setter->set("k2", "2");
  });
  auto start = Clock::now();
  store->wait({"k1", "k2"}, 10s);
  EXPECT_LT(Clock::now() - start, 5s);
  auto values = store->multiGet({"k2", "k1"});
  EXPECT_EQ(toString(values[0]), "2");
  EXPECT_EQ(toString(values[1]), "1");
  t.join();
}

TEST_P(StoreTest, AddCountsAtomically) {
  auto store = client();
  EXPECT_EQ(store->add("counter", 5), 5);
  EXPECT_EQ(store->add("counter", -2), 3);
  EXPECT_EQ(store->add("counter", 0), 3);
  if (GetParam().name == "signed") {
    // Counters are not signed, so get() cannot vouch for one: add(key, 0) reads it.
    EXPECT_THROW(store->get("counter"), IoError);
  } else {
    EXPECT_EQ(toString(store->get("counter")), "3");
  }
  store->set("text", "not a number");
  EXPECT_THROW(store->add("text", 1), InvalidArgument);
  EXPECT_EQ(toString(store->get("text")), "not a number");
}

TEST_P(StoreTest, CompareSet) {
  auto store = client();
  // Absent and expected empty: sets.
  EXPECT_EQ(toString(store->compareSet("cas", {}, toBytes("a"))), "a");
  // Wrong expectation: returns the current value and leaves it.
  EXPECT_EQ(toString(store->compareSet("cas", toBytes("zzz"), toBytes("b"))), "a");
  EXPECT_EQ(toString(store->get("cas")), "a");
  // Right expectation: swaps.
  EXPECT_EQ(toString(store->compareSet("cas", toBytes("a"), toBytes("b"))), "b");
  EXPECT_EQ(toString(store->get("cas")), "b");
  // Absent with a non-empty expectation: nothing is set.
  EXPECT_TRUE(store->compareSet("cas-absent", toBytes("x"), toBytes("y")).empty());
  EXPECT_FALSE(store->check({"cas-absent"}));
}

TEST_P(StoreTest, CheckAndErase) {
  auto store = client();
  EXPECT_FALSE(store->check({"e1"}));
  store->set("e1", "v");
  store->set("e2", "v");
  EXPECT_TRUE(store->check({"e1", "e2"}));
  EXPECT_FALSE(store->check({"e1", "e3"}));
  EXPECT_TRUE(store->erase("e1"));
  EXPECT_FALSE(store->erase("e1"));
  EXPECT_FALSE(store->check({"e1"}));
  EXPECT_TRUE(store->check({}));
}

TEST_P(StoreTest, MissingListsTheAbsentKeysInOrderWithoutWaiting) {
  auto store = client();
  store->set("m2", "v");
  store->set("m4", "");
  const auto start = Clock::now();
  EXPECT_EQ(store->missing({"m1", "m2", "m3", "m4", "m5"}),
            (std::vector<std::string>{"m1", "m3", "m5"}));
  EXPECT_EQ(store->missing({"m2", "m4"}), std::vector<std::string>{});
  EXPECT_EQ(store->missing({}), std::vector<std::string>{});
  EXPECT_LT(Clock::now() - start, 5s);  // nothing waited (the store's timeout is 10 s)
  store->erase("m2");
  EXPECT_EQ(store->missing({"m2"}), std::vector<std::string>{"m2"});
  EXPECT_THROW(store->missing({""}), InvalidArgument);
}

TEST_P(StoreTest, MultiSetMultiGet) {
  auto store = client();
  std::vector<std::string> keys;
  std::vector<Bytes> values;
  for (int i = 0; i < 100; ++i) {
    keys.push_back("m/" + std::to_string(i));
    values.push_back(toBytes("value " + std::to_string(i * i)));
  }
  store->multiSet(keys, values);
  EXPECT_EQ(store->multiGet(keys), values);
  EXPECT_THROW(store->multiSet({"a", "b"}, {toBytes("1")}), InvalidArgument);
  EXPECT_TRUE(store->multiGet({}).empty());
}

TEST_P(StoreTest, ZeroByteAndBinaryValues) {
  auto store = client();
  store->set("empty", Bytes{});
  EXPECT_TRUE(store->check({"empty"}));
  EXPECT_TRUE(store->get("empty").empty());
  Bytes binary(256 * 4);
  for (std::size_t i = 0; i < binary.size(); ++i) binary[i] = static_cast<std::uint8_t>(i * 7);
  store->set("binary", binary);
  EXPECT_EQ(store->get("binary"), binary);
  // Keys with separators, spaces and non-ASCII bytes.
  std::string key = "a/b c\t%d\xc3\xa9/../x";
  store->set(key, "odd key");
  EXPECT_EQ(toString(store->get(key)), "odd key");
}

TEST_P(StoreTest, SixtyFourMebibyteValue) {
  COLLX_SKIP_UNDER_TSAN(
      "64 MiB through each store repeats the paths of the smaller values (9 MiB in "
      "tls_test), at length");
  auto store = client(60s);
  Bytes big(64u << 20);
  std::mt19937_64 rng(42);
  for (std::size_t i = 0; i + 8 <= big.size(); i += 8) {
    std::uint64_t v = rng();
    std::memcpy(big.data() + i, &v, 8);
  }
  store->set("big", big);
  Bytes back = client(60s)->get("big");
  ASSERT_EQ(back.size(), big.size());
  EXPECT_TRUE(back == big);
}

TEST_P(StoreTest, InvalidKeys) {
  auto store = client();
  EXPECT_THROW(store->set("", "x"), InvalidArgument);
  EXPECT_THROW(store->get(std::string(kMaxKeyBytes + 1, 'k')), InvalidArgument);
  EXPECT_THROW(store->wait({"ok", ""}), InvalidArgument);
  store->set(std::string(kMaxKeyBytes - 64, 'k'), "long key");  // long but within the limit
  EXPECT_EQ(toString(store->get(std::string(kMaxKeyBytes - 64, 'k'))), "long key");
}

TEST_P(StoreTest, SixtyFourConcurrentClients) {
  constexpr int kClients = 64;
  constexpr int kAdds = 20;
  std::vector<std::shared_ptr<Store>> clients;
  for (int i = 0; i < kClients; ++i) clients.push_back(client(60s, i));
  std::vector<std::string> everyone;
  for (int i = 0; i < kClients; ++i) everyone.push_back("client/" + std::to_string(i));
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      try {
        Store& s = *clients[i];
        for (int a = 0; a < kAdds; ++a) s.add("hammer", 1);
        s.set(everyone[i], std::to_string(i));
        s.wait(everyone);
        auto values = s.multiGet(everyone);
        for (int j = 0; j < kClients; ++j) {
          if (toString(values[j]) != std::to_string(j)) failures++;
        }
      } catch (const std::exception& e) {
        ADD_FAILURE() << "client " << i << ": " << e.what();
        failures++;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(client()->add("hammer", 0), kClients * kAdds);
}

TEST_P(StoreTest, ReopenedStoreSeesTheSameKeys) {
  auto store = client(10s, 3);
  std::unique_ptr<Store> other = store->reopen();
  ASSERT_NE(other, nullptr);
  EXPECT_EQ(other->timeout(), 10s);  // unset options take the store's
  EXPECT_EQ(other->rank(), 3);
  EXPECT_EQ(other->describe(), store->describe());
  store->set("via/first", "one");
  EXPECT_EQ(toString(other->get("via/first")), "one");
  other->set("via/second", "two");
  EXPECT_EQ(toString(store->get("via/second")), "two");
  EXPECT_EQ(store->add("counter", 2), 2);
  EXPECT_EQ(other->add("counter", 3), 5);
  EXPECT_EQ(toString(other->compareSet("cas", Bytes(), toBytes("won"))), "won");
  EXPECT_EQ(toString(store->compareSet("cas", Bytes(), toBytes("lost"))), "won");
  EXPECT_TRUE(other->erase("via/first"));
  EXPECT_FALSE(store->check({"via/first"}));

  StoreOptions quick;
  quick.timeout = 200ms;
  quick.rank = 5;
  std::unique_ptr<Store> watcher = other->reopen(quick);
  ASSERT_NE(watcher, nullptr);
  EXPECT_EQ(watcher->timeout(), 200ms);
  EXPECT_EQ(watcher->rank(), 5);
  EXPECT_EQ(toString(watcher->get("via/second")), "two");
  // A store reopened from a reopened one outlives it.
  other.reset();
  watcher->set("via/third", "three");
  EXPECT_EQ(toString(store->get("via/third")), "three");
}

// The point of reopen(): a request through the reopened store is not queued behind one that
// blocks in the first (a TcpStore serializes one client's requests).
TEST_P(StoreTest, ReopenedStoreIsNotQueuedBehindABlockedRequest) {
  auto store = client(10s);
  std::unique_ptr<Store> other = store->reopen();
  ASSERT_NE(other, nullptr);
  std::string got;
  std::thread waiter([&] {
    try {
      got = toString(store->get("later", 8s));
    } catch (const std::exception& e) {
      got = e.what();
    }
  });
  std::this_thread::sleep_for(200ms);  // the waiter holds its connection
  auto start = Clock::now();
  other->set("later", "woken");
  EXPECT_EQ(toString(other->get("later")), "woken");
  EXPECT_LT(Clock::now() - start, 2s);
  waiter.join();
  EXPECT_EQ(got, "woken");
}

TEST(StoreReopen, HashStoreReopenedSharesTheMapAndOutlivesIt) {
  auto store = std::make_unique<HashStore>();
  std::unique_ptr<Store> other = store->reopen();
  ASSERT_NE(other, nullptr);
  store->set("k", "v");
  store.reset();
  EXPECT_EQ(toString(other->get("k")), "v");
  EXPECT_FALSE(HashStore().check({"k"}));  // a new HashStore is a new map
}

// A store that overrides no doReopen (as the torch c10d adapter): reopen() says so with
// nullptr, and a PrefixStore over it passes that on.
TEST(StoreReopen, StoresThatCannotReopenReturnNull) {
  class Opaque final : public Store {
   public:
    Opaque() : Store(StoreOptions{}) {}
    std::string describe() const override { return "opaque"; }

   protected:
    void doSet(const std::string&, const Bytes&) override {}
    std::vector<std::string> doWait(const std::vector<std::string>& keys,
                                    Clock::time_point) override {
      return keys;
    }
    std::vector<std::string> doMultiGet(const std::vector<std::string>& keys, Clock::time_point,
                                        std::vector<Bytes>&) override {
      return keys;
    }
    std::int64_t doAdd(const std::string&, std::int64_t) override { return 0; }
    Bytes doCompareSet(const std::string&, const Bytes&, const Bytes&) override { return {}; }
    bool doCheck(const std::vector<std::string>&) override { return false; }
    bool doErase(const std::string&) override { return false; }
  };
  auto opaque = std::make_shared<Opaque>();
  EXPECT_EQ(opaque->reopen(), nullptr);
  EXPECT_EQ(PrefixStore("job", opaque).reopen(), nullptr);
}

// A watcher's store with a short timeout must learn that the server stopped answering within
// that timeout, not the first store's: here the server is a process stopped with SIGSTOP
// (its kernel still accepts connections; nothing answers).
TEST(StoreReopen, ShortTimeoutFailsInTimeWhenTheServerIsStopped) {
  // The helper binds it itself (test::serverPort: not a released port-0 port).
  const int port = test::serverPort();
  test::Process server(
      {test::binDir() + "/collx-test-store-helper", "serve", std::to_string(port)});
  for (int i = 0; i < 1000 && !test::portOpen(port); ++i) {
    ASSERT_FALSE(server.wait(10ms)) << "the store server exited: " << server.err();
  }
  ASSERT_TRUE(test::portOpen(port));
  StoreOptions patient;
  patient.timeout = 30s;
  TcpStore store("127.0.0.1", static_cast<std::uint16_t>(port), patient);
  store.set("k", "v");
  constexpr auto kShort = 300ms;
  StoreOptions quick;
  quick.timeout = kShort;
  std::unique_ptr<Store> watcher = store.reopen(quick);
  ASSERT_NE(watcher, nullptr);
  EXPECT_EQ(toString(watcher->get("k")), "v");

  server.signal(SIGSTOP);
  ASSERT_TRUE(test::waitForProcessState(server.pid(), 'T', 10s));
  auto timed = [&](const char* what, std::chrono::milliseconds within,
                   const std::function<void()>& op) {
    auto start = Clock::now();
    EXPECT_THROW(op(), TimeoutError) << what;
    auto took = Clock::now() - start;
    EXPECT_GE(took, kShort - 50ms) << what;
    // Margin for a loaded machine; the point is that it is not the 30 s of the first store.
    EXPECT_LT(took, within + 1s) << what;
  };
  // (Requests that timed out may still be served once the server resumes: other keys.)
  timed("set", kShort, [&] { watcher->set("late", "w"); });
  timed("add", kShort, [&] { watcher->add("n", 1); });
  timed("compareSet", kShort, [&] { watcher->compareSet("late", Bytes(), toBytes("w")); });
  timed("check", kShort, [&] { watcher->check({"k"}); });
  // A get the server may hold for its wait: the wait plus twice the timeout at most.
  timed("get", 200ms + 2 * kShort, [&] { watcher->get("k", 200ms); });
  // Reopening while it is stopped: the handshake never comes back.
  timed("reopen", kShort, [&] { store.reopen(quick); });

  server.signal(SIGCONT);
  EXPECT_EQ(toString(watcher->get("k")), "v");  // reconnected
}

// Stores that other processes can open by URL (not hash, in-process; not prefix, a wrapper).
class CrossProcessStoreTest : public StoreTest {};

TEST_P(CrossProcessStoreTest, WaiterWokenBySetFromAnotherProcess) {
  ASSERT_FALSE(backend_->url().empty());
  auto store = client(30s);
  test::Process helper({test::binDir() + "/collx-test-store-helper", backend_->url(), "set",
                        "from-child", "hello", "300"});
  auto start = Clock::now();
  EXPECT_EQ(toString(store->get("from-child", 20s)), "hello");
  EXPECT_GE(Clock::now() - start, 250ms);  // it really waited for the other process
  ASSERT_TRUE(helper.wait(10s));
  EXPECT_EQ(helper.exitCode(), 0) << helper.err();
  // And the other way round: the other process waits for our set.
  test::Process waiter({test::binDir() + "/collx-test-store-helper", backend_->url(), "get",
                        "from-parent", "", "0"});
  std::this_thread::sleep_for(200ms);
  EXPECT_FALSE(waiter.exited());
  store->set("from-parent", "hi child");
  ASSERT_TRUE(waiter.wait(10s));
  EXPECT_EQ(waiter.exitCode(), 0) << waiter.err();
  EXPECT_EQ(waiter.out(), "hi child\n");
}

INSTANTIATE_TEST_SUITE_P(AllStores, StoreTest, ::testing::ValuesIn(kinds()),
                         [](const auto& param) { return param.param.name; });
INSTANTIATE_TEST_SUITE_P(SharedStores, CrossProcessStoreTest,
                         ::testing::ValuesIn(crossProcessKinds()),
                         [](const auto& param) { return param.param.name; });

TEST(StoreUrl, ParsesEveryScheme) {
  StoreUrl tcp = StoreUrl::parse("tcp://node1:29500");
  EXPECT_EQ(tcp.scheme, "tcp");
  EXPECT_EQ(tcp.host, "node1");
  EXPECT_EQ(tcp.port, 29500);
  StoreUrl v6 = StoreUrl::parse("tcp://[::1]:123");
  EXPECT_EQ(v6.host, "::1");
  EXPECT_EQ(v6.str(), "tcp://[::1]:123");
  StoreUrl file = StoreUrl::parse("file:///shared/dir");
  EXPECT_EQ(file.path, "/shared/dir");
  StoreUrl redis = StoreUrl::parse("redis://cache:6380/3");
  EXPECT_EQ(redis.port, 6380);
  EXPECT_EQ(redis.db, 3);
  EXPECT_EQ(StoreUrl::parse("redis://cache").port, 6379);
}

// Why parse() refuses `url` ("accepted" when it does not).
std::string reason(const std::string& url) {
  try {
    StoreUrl::parse(url);
  } catch (const InvalidArgument& e) {
    return std::string(e.what());
  }
  return std::string("accepted");
}

TEST(StoreUrl, RedisTakesAUserAndAPasswordAndNeverShowsThePassword) {
  StoreUrl url = StoreUrl::parse("redis://ml%20team:p%40ss%3Aw0rd@cache:6380/2");
  EXPECT_EQ(url.user, "ml team");
  EXPECT_EQ(url.password, "p@ss:w0rd");
  EXPECT_EQ(url.host, "cache");
  EXPECT_EQ(url.port, 6380);
  EXPECT_EQ(url.db, 2);
  EXPECT_EQ(StoreUrl::parse(url.str()).password, "p@ss:w0rd");
  EXPECT_EQ(StoreUrl::parse("redis://:secret@cache").user, "");
  EXPECT_EQ(hidePassword("redis://:secret@cache:6379/1"), "redis://:***@cache:6379/1");
  EXPECT_EQ(hidePassword("redis://me:secret@cache"), "redis://me:***@cache");
  EXPECT_EQ(hidePassword("tcp://host:29500"), "tcp://host:29500");
  EXPECT_NE(reason("redis://me@cache").find("no password"), std::string::npos);
  EXPECT_NE(reason("redis://:@cache").find("password is empty"), std::string::npos);
  const std::string bad = reason("redis://:secret%zz@cache");
  EXPECT_NE(bad.find("two hex digits"), std::string::npos) << bad;
  EXPECT_EQ(bad.find("secret"), std::string::npos) << bad;
}

TEST(StoreUrl, RejectsMalformedUrlsWithReasons) {
  EXPECT_NE(reason("tcp://host").find("port is missing"), std::string::npos);
  EXPECT_NE(reason("tcp://host:99999").find("not in 1..65535"), std::string::npos);
  EXPECT_NE(reason("tcp://::1:5").find("brackets"), std::string::npos);
  EXPECT_NE(reason("file://relative").find("absolute path"), std::string::npos);
  EXPECT_NE(reason("ftp://x:1").find("unknown scheme"), std::string::npos);
  EXPECT_NE(reason("nonsense").find("no scheme"), std::string::npos);
}

// A URL comes from the environment or a command line: its length, host and characters are
// bounded, and an error shows at most 200 bytes of it, control characters escaped.
TEST(StoreUrl, HasBoundsAndShowsLittle) {
  const std::string host253 = std::string(250, 'a') + ".bc";
  EXPECT_EQ(StoreUrl::parse("tcp://" + host253 + ":1").host, host253);
  EXPECT_NE(reason("tcp://" + host253 + "d:1").find("the host has 254 bytes, more than 253"),
            std::string::npos);
  EXPECT_EQ(StoreUrl::parse("tcp://node_1.rack-2.Example.org:5").host, "node_1.rack-2.Example.org");
  EXPECT_NE(reason("tcp://no de:1").find("has a character other than"), std::string::npos);
  EXPECT_NE(reason("tcp://h@st:1").find("has a character other than"), std::string::npos);
  EXPECT_NE(reason("redis://h!st:1").find("has a character other than"), std::string::npos);
  EXPECT_EQ(StoreUrl::parse("tcp://[fe80::1%eth0]:7").host, "fe80::1%eth0");
  EXPECT_EQ(StoreUrl::parse("tcp://[::ffff:10.0.0.1]:7").host, "::ffff:10.0.0.1");
  EXPECT_NE(reason("tcp://[node1]:7").find("in brackets is not an IPv6 address"),
            std::string::npos);
  EXPECT_NE(reason("tcp://[::g]:7").find("in brackets is not an IPv6 address"), std::string::npos);
  EXPECT_NE(reason("tcp://[::1%]:7").find("in brackets is not an IPv6 address"), std::string::npos);
  const std::string withNewline = reason("tcp://host\n:1");
  EXPECT_NE(withNewline.find("a control character"), std::string::npos);
  EXPECT_NE(withNewline.find("'tcp://host\\x0a:1'"), std::string::npos) << withNewline;
  EXPECT_NE(reason(std::string("file:///a\0b", 11)).find("a control character"), std::string::npos);
  const std::string longPath = "file:///" + std::string(kMaxStoreUrlBytes - 8, 'p');
  EXPECT_EQ(StoreUrl::parse(longPath).path.size(), kMaxStoreUrlBytes - 7);
  const std::string tooLong = reason(longPath + "p");
  EXPECT_NE(tooLong.find("the URL has 4097 bytes, more than 4096"), std::string::npos);
  EXPECT_NE(tooLong.find("... (4097 bytes)"), std::string::npos);
  EXPECT_LT(tooLong.size(), 400u);
  EXPECT_LT(reason("tcp://h:" + std::string(3000, '9')).size(), 400u);
  // What parse() accepts, str() writes back the same.
  for (const char* url : {"tcp://node1:29500", "tcp://[::1]:123", "redis://cache:6380/3",
                          "file:///shared/dir", "hash://", "tcp://[fe80::1%eth0]:7"}) {
    EXPECT_EQ(StoreUrl::parse(url).str(), url);
  }
}

TEST(FileStoreTest, LeavesNoTemporaryFiles) {
  TempDir dir;
  FileStore store(dir.path());
  for (int i = 0; i < 20; ++i) store.set("k" + std::to_string(i % 3), std::to_string(i));
  store.add("n", 3);
  int temporaries = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    if (entry.path().filename().string().rfind(".tmp", 0) == 0) ++temporaries;
  }
  EXPECT_EQ(temporaries, 0);
}

TEST(FileStoreTest, UnwritableDirectoryIsAnIoError) {
  EXPECT_THROW(FileStore("/proc/collx-cannot-exist"), IoError);
}

TEST(FileStoreTest, DirectoryAndFilesAreForThisUserOnly) {
  TempDir dir;
  const std::string path = dir.path() + "/a/b";
  FileStore store(path);
  store.set("k", "v");
  store.add("n", 1);
  auto mode = [](const std::string& p) {
    struct stat st {};
    EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
    return st.st_mode & 0777;
  };
  EXPECT_EQ(mode(dir.path() + "/a"), 0700u);
  EXPECT_EQ(mode(path), 0700u);
  for (const auto& entry : std::filesystem::directory_iterator(path)) {
    EXPECT_EQ(mode(entry.path().string()), 0600u) << entry.path();
  }
}

TEST(FileStoreTest, ALinkOrADirectoryInPlaceOfAValueIsRefused) {
  TempDir dir;
  FileStore store(dir.path());
  store.set("real", "secret things");
  ASSERT_EQ(::symlink((dir.path() + "/real").c_str(), (dir.path() + "/link").c_str()), 0);
  ASSERT_EQ(::mkdir((dir.path() + "/folder").c_str(), 0700), 0);
  EXPECT_THROW(store.get("link", 100ms), IoError);
  try {
    store.get("folder", 100ms);
    FAIL() << "a directory was read as a value";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
  }
}

// What another client of a shared store writes is refused, naming the key: a value without
// a tag, a value with another secret's tag, a value moved from another key.
TEST(SignedStoreTest, ForgedAndMovedValuesAreRefusedNamingTheKey) {
  TempDir dir;
  auto raw = std::make_shared<FileStore>(dir.path());
  SignedStore store(raw, testSecret());
  SignedStore stranger(raw, testSecret("another secret, not the job's"));
  store.set("rank/0", "host a pid 1");
  EXPECT_EQ(toString(store.get("rank/0")), "host a pid 1");
  EXPECT_NE(toString(raw->get("rank/0")), "host a pid 1");  // stored with its tag

  auto refused = [&](const std::string& key) {
    try {
      store.get(key, 100ms);
    } catch (const IoError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  raw->set("rank/1", "host evil pid 2");
  EXPECT_NE(refused("rank/1").find("value of key 'rank/1'"), std::string::npos)
      << refused("rank/1");
  EXPECT_NE(refused("rank/1").find("not signed with this job's secret"), std::string::npos);
  stranger.set("rank/2", "host evil pid 3");
  EXPECT_NE(refused("rank/2").find("rank/2"), std::string::npos);
  EXPECT_THROW(stranger.get("rank/0", 100ms), IoError);
  raw->set("rank/3", raw->get("rank/0"));  // a good value under another key
  EXPECT_NE(refused("rank/3").find("rank/3"), std::string::npos);
  // compareSet returns only values it can vouch for.
  EXPECT_THROW(store.compareSet("rank/1", {}, toBytes("mine")), IoError);
  EXPECT_EQ(toString(store.compareSet("rank/0", toBytes("host a pid 1"), toBytes("x"))), "x");
  // Counters are not signed (see signed_store.h).
  EXPECT_EQ(store.add("left", 2), 2);
  EXPECT_EQ(raw->add("left", 1), 3);
}

TEST(SignedStoreTest, WrapsOnlyWhatOthersCanWrite) {
  TempDir dir;
  auto secret = testSecret();
  std::shared_ptr<Store> file = std::make_shared<FileStore>(dir.path());
  EXPECT_NE(SignedStore::wrapIfNeeded(file, secret), file);
  EXPECT_EQ(SignedStore::wrapIfNeeded(file, nullptr), file);
  std::shared_ptr<Store> hash = std::make_shared<HashStore>();
  EXPECT_EQ(SignedStore::wrapIfNeeded(hash, secret), hash);
  TcpStoreServer::Options options;
  options.secret = secret;
  TcpStoreServer server(options);
  StoreOptions client;
  client.secret = secret;
  std::shared_ptr<Store> tcp = std::make_shared<TcpStore>("127.0.0.1", server.port(), client);
  EXPECT_EQ(SignedStore::wrapIfNeeded(tcp, secret), tcp);
}

}  // namespace
}  // namespace collx::rendezvous
