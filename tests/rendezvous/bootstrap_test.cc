// Bootstrap from the environment (collx, torchrun, Open MPI, Slurm conventions) and joining
// a job: ranks as threads over real stores, and real processes through the conventions.
#include "collx/bootstrap.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "collx/base/config.h"
#include "collx/context.h"
#include "collx/rendezvous/hash_store.h"
#include "collx/rendezvous/pmix_store.h"
#include "collx/rendezvous/tcp_store.h"
#include "util/test_util.h"

namespace collx {
namespace {

using namespace std::chrono_literals;
using rendezvous::HashStore;
using rendezvous::Store;
using rendezvous::TcpStore;
using rendezvous::TcpStoreServer;

Bootstrap resolveEnv(Config::Environment env, const BootstrapOptions& options = {}) {
  return Bootstrap::resolve(options, Config(std::move(env)));
}

// The InvalidArgument message of resolving `env`, or "" when it resolves.
std::string resolveError(Config::Environment env, const BootstrapOptions& options = {}) {
  try {
    resolveEnv(std::move(env), options);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

std::string originOf(const Bootstrap& b, const std::string& what) {
  for (const auto& [name, origin] : b.origin) {
    if (name == what) return origin;
  }
  return "";
}

TEST(BootstrapResolve, NothingSetIsRankZeroOfOne) {
  Bootstrap b = resolveEnv({});
  EXPECT_EQ(b.rank, 0);
  EXPECT_EQ(b.worldSize, 1);
  EXPECT_EQ(b.storeUrl, "hash://");
  EXPECT_EQ(b.launcher, "none");
  EXPECT_EQ(b.jobId, "default");
  EXPECT_EQ(b.generation, 0);
  EXPECT_EQ(b.timeout, 300s);
}

TEST(BootstrapResolve, CollxVariables) {
  Bootstrap b = resolveEnv({{"COLLX_RANK", "2"},
                            {"COLLX_WORLD_SIZE", "4"},
                            {"COLLX_LOCAL_RANK", "0"},
                            {"COLLX_STORE", "tcp://10.1.2.3:4000"},
                            {"COLLX_JOB_ID", "job-7"},
                            {"COLLX_GENERATION", "3"},
                            {"COLLX_TIMEOUT", "45s"}});
  EXPECT_EQ(b.rank, 2);
  EXPECT_EQ(b.worldSize, 4);
  EXPECT_EQ(b.localRank, 0);
  EXPECT_EQ(b.storeUrl, "tcp://10.1.2.3:4000");
  EXPECT_FALSE(b.rank0HostsStore);
  EXPECT_EQ(b.jobId, "job-7");
  EXPECT_EQ(b.generation, 3);
  EXPECT_EQ(b.timeout, 45s);
  EXPECT_EQ(b.launcher, "collx");
  EXPECT_EQ(originOf(b, "rank"), "COLLX_RANK=2");
}

TEST(BootstrapResolve, TheJobSecretAndWhereItCameFrom) {
  Bootstrap none =
      resolveEnv({{"COLLX_RANK", "0"}, {"COLLX_WORLD_SIZE", "2"}, {"COLLX_STORE", "tcp://h:1"}});
  EXPECT_EQ(none.secret, nullptr);
  EXPECT_FALSE(none.insecure);
  EXPECT_EQ(originOf(none, "secret"), "none (unauthenticated)");
  Bootstrap insecure = resolveEnv({{"COLLX_RANK", "0"},
                                   {"COLLX_WORLD_SIZE", "2"},
                                   {"COLLX_STORE", "tcp://h:1"},
                                   {"COLLX_INSECURE", "1"}});
  EXPECT_TRUE(insecure.insecure);
  EXPECT_EQ(originOf(insecure, "secret"), "none (COLLX_INSECURE=1)");
  const std::string secret = "sixteen bytes or more of secret";
  Bootstrap given = resolveEnv({{"COLLX_RANK", "0"},
                                {"COLLX_WORLD_SIZE", "2"},
                                {"COLLX_STORE", "tcp://h:1"},
                                {"COLLX_JOB_SECRET", secret}});
  ASSERT_NE(given.secret, nullptr);
  EXPECT_EQ(originOf(given, "secret"), "COLLX_JOB_SECRET");
  for (const auto& [what, origin] : given.origin) {
    EXPECT_EQ(origin.find(secret), std::string::npos) << what;
  }
  try {
    resolveEnv({{"COLLX_RANK", "0"},
                {"COLLX_WORLD_SIZE", "2"},
                {"COLLX_STORE", "tcp://h:1"},
                {"COLLX_JOB_SECRET", "short"}});
    ADD_FAILURE() << "a 5-byte secret accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("16 to 1024"), std::string::npos) << e.what();
  }
}

TEST(BootstrapResolve, Torchrun) {
  Bootstrap b = resolveEnv({{"RANK", "1"},
                            {"WORLD_SIZE", "8"},
                            {"LOCAL_RANK", "1"},
                            {"MASTER_ADDR", "node0"},
                            {"MASTER_PORT", "29500"},
                            {"TORCHELASTIC_RUN_ID", "none-123"}});
  EXPECT_EQ(b.launcher, "torchrun");
  EXPECT_EQ(b.rank, 1);
  EXPECT_EQ(b.worldSize, 8);
  EXPECT_EQ(b.storeUrl, "tcp://node0:29500");
  EXPECT_TRUE(b.rank0HostsStore);
  EXPECT_EQ(b.jobId, "none-123");
}

TEST(BootstrapResolve, OpenMpiAndSlurm) {
  Bootstrap mpi = resolveEnv({{"OMPI_COMM_WORLD_RANK", "3"},
                              {"OMPI_COMM_WORLD_SIZE", "4"},
                              {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                              {"COLLX_STORE", "file:///shared/rdzv"}});
  EXPECT_EQ(mpi.launcher, "openmpi");
  EXPECT_EQ(mpi.rank, 3);
  EXPECT_EQ(mpi.localRank, 1);
  EXPECT_EQ(mpi.storeUrl, "file:///shared/rdzv");

  Bootstrap slurm = resolveEnv({{"SLURM_PROCID", "5"},
                                {"SLURM_NTASKS", "6"},
                                {"SLURM_LOCALID", "2"},
                                {"SLURM_JOB_ID", "12345"},
                                {"SLURM_STEP_ID", "0"},
                                {"MASTER_ADDR", "10.0.0.1"},
                                {"MASTER_PORT", "29500"}});
  EXPECT_EQ(slurm.launcher, "slurm");
  EXPECT_EQ(slurm.rank, 5);
  EXPECT_EQ(slurm.worldSize, 6);
  EXPECT_EQ(slurm.jobId, "12345.0");
}

TEST(BootstrapResolve, OrderOfSourcesAndExplicitOptions) {
  // collx's variables come before torchrun's, torchrun's before Open MPI's and Slurm's.
  Bootstrap b = resolveEnv({{"COLLX_RANK", "0"},
                            {"COLLX_WORLD_SIZE", "2"},
                            {"RANK", "5"},
                            {"WORLD_SIZE", "9"},
                            {"SLURM_PROCID", "1"},
                            {"SLURM_NTASKS", "2"},
                            {"COLLX_STORE", "tcp://h:1"}});
  EXPECT_EQ(b.launcher, "collx");
  EXPECT_EQ(b.worldSize, 2);
  Bootstrap t = resolveEnv({{"RANK", "5"},
                            {"WORLD_SIZE", "9"},
                            {"SLURM_PROCID", "1"},
                            {"SLURM_NTASKS", "2"},
                            {"COLLX_STORE", "tcp://h:1"}});
  EXPECT_EQ(t.launcher, "torchrun");
  EXPECT_EQ(t.rank, 5);
  BootstrapOptions options;
  options.rank = 1;
  options.worldSize = 3;
  options.store = "tcp://other:2";
  options.jobId = "explicit";
  Bootstrap o = resolveEnv({{"COLLX_RANK", "0"}, {"COLLX_WORLD_SIZE", "2"}}, options);
  EXPECT_EQ(o.launcher, "options");
  EXPECT_EQ(o.rank, 1);
  EXPECT_EQ(o.worldSize, 3);
  EXPECT_EQ(o.storeUrl, "tcp://other:2");
  EXPECT_EQ(o.jobId, "explicit");
}

// PMIx's variables as mpirun sets them, naming a server that is not there (port 9, discard:
// nothing listens). Resolving never connects unless PMIx is the source.
Config::Environment deadPmixServer() {
  return {{"PMIX_NAMESPACE", "4242"},
          {"PMIX_RANK", "1"},
          {"PMIX_SERVER_URI41", "4241.0;tcp4://127.0.0.1:9"},
          {"PMIX_SERVER_URI4", "4241.0;tcp4://127.0.0.1:9"},
          {"OMPI_COMM_WORLD_RANK", "1"},
          {"OMPI_COMM_WORLD_SIZE", "2"}};
}

TEST(BootstrapResolve, PmixIsNotConsultedWhenAStoreOrARankIsGiven) {
  // An explicit store: Open MPI's variables give rank and size, as before PMIx.
  Config::Environment env = deadPmixServer();
  env["COLLX_STORE"] = "file:///shared/rdzv";
  Bootstrap b = resolveEnv(env);
  EXPECT_EQ(b.launcher, "openmpi");
  EXPECT_FALSE(b.viaPmix);
  EXPECT_EQ(b.rank, 1);
  env = deadPmixServer();
  env["MASTER_ADDR"] = "10.0.0.1";
  env["MASTER_PORT"] = "29500";
  EXPECT_EQ(resolveEnv(env).launcher, "openmpi");
  // collx's or torchrun's rank and size come first, with their store.
  env = deadPmixServer();
  env["RANK"] = "0";
  env["WORLD_SIZE"] = "2";
  env["MASTER_ADDR"] = "10.0.0.1";
  env["MASTER_PORT"] = "29500";
  EXPECT_EQ(resolveEnv(env).launcher, "torchrun");
  // A variable that names no URI is not a PMIx server.
  env = {{"PMIX_NAMESPACE", "4242"}, {"PMIX_RANK", "0"}};
  EXPECT_FALSE(rendezvous::pmixServerIn(Config(env)));
  EXPECT_TRUE(rendezvous::pmixServerIn(Config(deadPmixServer())));
}

TEST(BootstrapResolve, PmixStoreAskedWithoutAServerNamesWhatIsMissing) {
  std::string error = resolveError({{"COLLX_STORE", "pmix://"}});
  EXPECT_NE(error.find("COLLX_STORE=pmix:// but the environment names no PMIx server"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("mpirun or srun --mpi=pmix"), std::string::npos) << error;
  // Slurm's variables without PMIx and without a store: the error says how to get one.
  error = resolveError({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}});
  EXPECT_NE(error.find("no store for a world of 2 ranks"), std::string::npos) << error;
  EXPECT_NE(error.find("srun --mpi=pmix gives one"), std::string::npos) << error;
}

TEST(BootstrapResolve, ErrorsNameTheVariable) {
  struct Case {
    Config::Environment env;
    std::vector<std::string> mentions;
  };
  const Case cases[] = {
      {{{"COLLX_RANK", "1"}, {"COLLX_STORE", "tcp://h:1"}}, {"COLLX_RANK='1'", "COLLX_WORLD_SIZE"}},
      {{{"WORLD_SIZE", "4"}}, {"WORLD_SIZE='4'", "RANK is not"}},
      {{{"RANK", "abc"}, {"WORLD_SIZE", "4"}}, {"RANK='abc'", "integer"}},
      {{{"COLLX_RANK", "4"}, {"COLLX_WORLD_SIZE", "4"}},
       {"COLLX_RANK='4'", "COLLX_WORLD_SIZE='4'"}},
      {{{"COLLX_RANK", "-1"}, {"COLLX_WORLD_SIZE", "4"}}, {"COLLX_RANK='-1'"}},
      {{{"COLLX_RANK", "0"}, {"COLLX_WORLD_SIZE", "0"}}, {"COLLX_WORLD_SIZE='0'"}},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "2"}, {"COLLX_STORE", "tcp://h:1"}},
       {"LOCAL_RANK='2'"}},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}},
       {"MASTER_ADDR='h'", "MASTER_PORT"}},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}},
       {"MASTER_PORT='70000'"}},
      {{{"COLLX_RANK", "0"}, {"COLLX_WORLD_SIZE", "2"}, {"COLLX_STORE", "http://x"}},
       {"COLLX_STORE", "unknown scheme"}},
      {{{"COLLX_RANK", "0"}, {"COLLX_WORLD_SIZE", "2"}},
       {"no store", "COLLX_STORE", "MASTER_ADDR"}},
      {{{"COLLX_STORE", "tcp://h:1"}}, {"no rank", "COLLX_RANK"}},
      {{{"COLLX_JOB_ID", "a/b"}}, {"COLLX_JOB_ID=a/b"}},
      {{{"COLLX_TIMEOUT", "0"}}, {"COLLX_TIMEOUT='0'", "a duration of at least 1ms"}},
      {{{"COLLX_TIMEOUT", "soon"}}, {"COLLX_TIMEOUT='soon'"}},
      {{{"COLLX_GENERATION", "-2"}}, {"COLLX_GENERATION='-2'"}},
  };
  for (const Case& c : cases) {
    std::string error = resolveError(c.env);
    EXPECT_FALSE(error.empty()) << "accepted case mentioning " << c.mentions[0];
    for (const std::string& m : c.mentions) {
      EXPECT_NE(error.find(m), std::string::npos) << "'" << error << "' lacks '" << m << "'";
    }
  }
  BootstrapOptions half;
  half.rank = 0;
  EXPECT_NE(resolveError({}, half).find("worldSize"), std::string::npos);
  // Options set in code are held to the same ranges as the variables.
  BootstrapOptions instant;
  instant.timeout = std::chrono::milliseconds(0);
  const std::string timeoutError = resolveError({}, instant);
  EXPECT_NE(timeoutError.find("BootstrapOptions::timeout=0s: expected a duration of at least 1ms"),
            std::string::npos)
      << timeoutError;
  BootstrapOptions negative;
  negative.generation = -1;
  EXPECT_NE(resolveError({}, negative).find("BootstrapOptions::generation=-1"), std::string::npos);
}

// ---- joining, ranks as threads ----------------------------------------------------------

struct JoinCase {
  std::string store;
  int size;
};

class JoinTest : public ::testing::TestWithParam<JoinCase> {};

TEST_P(JoinTest, EveryRankSeesEveryPeer) {
  const int size = GetParam().size;
  std::unique_ptr<TcpStoreServer> server;
  std::shared_ptr<Store> shared;
  if (GetParam().store == "tcp") {
    server = std::make_unique<TcpStoreServer>();
  } else {
    shared = std::make_shared<HashStore>();
  }
  std::vector<std::shared_ptr<Context>> contexts(size);
  std::vector<std::string> errors(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        std::shared_ptr<Store> store = shared;
        rendezvous::StoreOptions so;
        so.timeout = 20s;
        so.rank = r;
        if (server) store = std::make_shared<TcpStore>("127.0.0.1", server->port(), so);
        ContextOptions options;
        options.jobId = "threads";
        options.generation = 5;
        options.localRank = r;
        options.timeout = 20s;
        contexts[r] = Context::create(store, r, size, options);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < size; ++r) {
    ASSERT_EQ(errors[r], "") << "rank " << r;
    const Context& c = *contexts[r];
    EXPECT_EQ(c.rank(), r);
    EXPECT_EQ(c.size(), size);
    EXPECT_EQ(c.generation(), 5);
    ASSERT_EQ(c.peers().size(), static_cast<std::size_t>(size));
    for (int p = 0; p < size; ++p) {
      EXPECT_EQ(c.peers()[p].rank, p);
      EXPECT_EQ(c.peers()[p].pid, ::getpid());
      EXPECT_EQ(c.peers()[p].localRank, p);
      EXPECT_FALSE(c.peers()[p].hostname.empty());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, JoinTest, ::testing::ValuesIn([] {
                           std::vector<JoinCase> cases;
                           for (const char* store : {"hash", "tcp"}) {
                             for (int p : {1, 2, 3, 4, 5, 7, 8, 11, 16})
                               cases.push_back({store, p});
                           }
                           return cases;
                         }()),
                         [](const auto& param) {
                           return param.param.store + "_P" + std::to_string(param.param.size);
                         });

ContextOptions quick(int localRank = -1, std::int64_t generation = 0) {
  ContextOptions options;
  options.timeout = 2s;
  options.localRank = localRank;
  options.generation = generation;
  return options;
}

TEST(JoinFailures, TwoProcessesWithOneRankIsAMismatchNamingTheOther) {
  auto store = std::make_shared<HashStore>();
  std::atomic<int> mismatches{0};
  std::string message;
  std::vector<std::thread> threads;
  for (int claimant = 0; claimant < 2; ++claimant) {
    threads.emplace_back([&, claimant] {
      try {
        Context::create(store, 0, 2, quick(/*localRank=*/claimant));
      } catch (const MismatchError& e) {
        mismatches++;
        message = e.what();
      } catch (const TimeoutError&) {
        // the winner waits for rank 1, which never comes
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches.load(), 1);
  EXPECT_NE(message.find("rank 0 is already taken by pid " + std::to_string(::getpid())),
            std::string::npos)
      << message;
}

TEST(JoinFailures, DisagreeingWorldSizesAreAMismatch) {
  auto store = std::make_shared<HashStore>();
  std::string message;
  std::thread first([&] {
    try {
      Context::create(store, 0, 2, quick());
    } catch (const Error&) {
    }
  });
  std::this_thread::sleep_for(100ms);
  try {
    Context::create(store, 1, 3, quick());
  } catch (const MismatchError& e) {
    message = e.what();
  }
  first.join();
  EXPECT_NE(message.find("world size 3"), std::string::npos) << message;
  EXPECT_NE(message.find("world size 2"), std::string::npos) << message;
}

TEST(JoinFailures, RanksThatNeverJoinAreNamed) {
  auto store = std::make_shared<HashStore>();
  std::vector<std::string> messages(2);
  std::vector<std::thread> threads;
  for (int r : {0, 2}) {
    threads.emplace_back([&, r] {
      auto start = std::chrono::steady_clock::now();
      try {
        ContextOptions o = quick();
        o.timeout = 300ms;
        Context::create(store, r, 4, o);
      } catch (const TimeoutError& e) {
        messages[r / 2] = e.what();
        EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const std::string& m : messages) {
    EXPECT_NE(m.find("2 of 4 ranks did not join"), std::string::npos) << m;
    EXPECT_NE(m.find("ranks 1, 3"), std::string::npos) << m;
  }
}

TEST(JoinFailures, InvalidArgumentsAreRefused) {
  auto store = std::make_shared<HashStore>();
  EXPECT_THROW(Context::create(store, 2, 2, quick()), InvalidArgument);
  EXPECT_THROW(Context::create(store, -1, 2, quick()), InvalidArgument);
  EXPECT_THROW(Context::create(store, 0, 0, quick()), InvalidArgument);
  EXPECT_THROW(Context::create(nullptr, 0, 1, quick()), InvalidArgument);
}

TEST(JoinGenerations, AJobFormsAgainUnderANewGeneration) {
  auto store = std::make_shared<HashStore>();
  for (std::int64_t generation : {0, 1, 2}) {
    std::vector<std::thread> threads;
    std::atomic<int> joined{0};
    for (int r = 0; r < 3; ++r) {
      threads.emplace_back([&, r] {
        auto c = Context::create(store, r, 3, quick(r, generation));
        if (c->generation() == generation && c->peers().size() == 3) joined++;
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(joined.load(), 3) << "generation " << generation;
    // The last rank to leave erased the generation's keys.
    const std::string prefix = "collx/default/" + std::to_string(generation) + "/";
    for (const char* key : {"rank/0", "rank/2", "transport/1", "world_size", "left"}) {
      EXPECT_FALSE(store->check({prefix + key})) << prefix + key;
    }
  }
  // Joining a generation that is still open finds its claims: a clear mismatch, not a hang.
  std::vector<std::shared_ptr<Context>> open(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] { open[r] = Context::create(store, r, 3, quick(r, 3)); });
  }
  for (auto& t : threads) t.join();
  EXPECT_THROW(Context::create(store, 0, 3, quick(/*localRank=*/7, 3)), MismatchError);
  EXPECT_TRUE(store->check({"collx/default/3/rank/0"}));
}

// ---- real processes through the launcher conventions ------------------------------------

struct Convention {
  std::string name;
  std::function<std::map<std::string, std::string>(int rank, int size, const std::string& extra)>
      env;
};

std::map<std::string, std::string> cleanEnv() {
  // Nothing of the test's own environment may leak into the ranks' bootstrap.
  std::map<std::string, std::string> env;
  for (const char* name : {"COLLX_RANK", "COLLX_WORLD_SIZE", "COLLX_LOCAL_RANK", "COLLX_STORE",
                           "COLLX_JOB_ID", "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                           "MASTER_PORT", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                           "SLURM_PROCID", "SLURM_NTASKS", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID"}) {
    env[name] = "";
  }
  env["COLLX_TIMEOUT"] = "20s";
  return env;
}

TEST(BootstrapProcesses, TorchrunConventionRankZeroHostsTheStore) {
  const int size = 3;
  // Rank 0 binds MASTER_PORT itself (test::serverPort: not a released port-0 port).
  const std::string port = std::to_string(test::serverPort());
  std::vector<std::unique_ptr<test::Process>> ranks;
  for (int r = 0; r < size; ++r) {
    auto env = cleanEnv();
    env["RANK"] = std::to_string(r);
    env["WORLD_SIZE"] = std::to_string(size);
    env["LOCAL_RANK"] = std::to_string(r);
    env["MASTER_ADDR"] = "127.0.0.1";
    env["MASTER_PORT"] = port;
    // Rank 0 starts last: the others must wait for its store to come up.
    if (r == 0) std::this_thread::sleep_for(300ms);
    ranks.push_back(std::make_unique<test::Process>(
        std::vector<std::string>{test::binDir() + "/collx-info", "--rendezvous"}, env));
  }
  for (int r = 0; r < size; ++r) {
    ASSERT_TRUE(ranks[r]->wait(30s)) << "rank " << r << " hangs";
    EXPECT_EQ(ranks[r]->exitCode(), 0) << ranks[r]->err();
    EXPECT_NE(ranks[r]->out().find("rank " + std::to_string(r) + " of 3"), std::string::npos);
    EXPECT_NE(ranks[r]->out().find("launcher torchrun"), std::string::npos) << ranks[r]->out();
  }
  EXPECT_FALSE(test::portOpen(std::stoi(port)));  // rank 0's store is gone with it
}

TEST(BootstrapProcesses, OpenMpiAndSlurmConventionsWithAFileStore) {
  for (const std::string convention : {"openmpi", "slurm"}) {
    test::TempDir dir;
    std::vector<std::unique_ptr<test::Process>> ranks;
    for (int r = 0; r < 2; ++r) {
      auto env = cleanEnv();
      env["COLLX_STORE"] = "file://" + dir.path();
      if (convention == "openmpi") {
        env["OMPI_COMM_WORLD_RANK"] = std::to_string(r);
        env["OMPI_COMM_WORLD_SIZE"] = "2";
      } else {
        env["SLURM_PROCID"] = std::to_string(r);
        env["SLURM_NTASKS"] = "2";
        env["SLURM_JOB_ID"] = "4242";
      }
      ranks.push_back(std::make_unique<test::Process>(
          std::vector<std::string>{test::binDir() + "/collx-info", "--rendezvous"}, env));
    }
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(ranks[r]->wait(30s)) << convention << " rank " << r << " hangs";
      EXPECT_EQ(ranks[r]->exitCode(), 0) << ranks[r]->err();
      EXPECT_NE(ranks[r]->out().find("launcher " + convention), std::string::npos)
          << ranks[r]->out();
    }
    if (convention == "slurm") {
      EXPECT_NE(ranks[0]->out().find("job 4242"), std::string::npos) << ranks[0]->out();
    }
  }
}

TEST(BootstrapProcesses, BadEnvironmentFailsNamingTheVariable) {
  auto env = cleanEnv();
  env["COLLX_RANK"] = "3";
  env["COLLX_WORLD_SIZE"] = "2";
  env["COLLX_STORE"] = "tcp://127.0.0.1:1";
  test::RunResult result = test::run({test::binDir() + "/collx-info", "--rendezvous"}, env, 20s);
  EXPECT_EQ(result.code, 1);
  EXPECT_NE(result.err.find("COLLX_RANK='3' is not below COLLX_WORLD_SIZE='2'"), std::string::npos)
      << result.err;
}

TEST(BootstrapProcesses, UnreachableStoreIsATimeoutNamingIt) {
  auto env = cleanEnv();
  test::ClosedPort closed;  // held: a released port could be taken by a parallel test's store
  const std::string port = std::to_string(closed.port());
  env["COLLX_RANK"] = "1";
  env["COLLX_WORLD_SIZE"] = "2";
  env["COLLX_STORE"] = "tcp://127.0.0.1:" + port;
  env["COLLX_TIMEOUT"] = "500ms";
  test::RunResult result = test::run({test::binDir() + "/collx-info", "--rendezvous"}, env, 20s);
  EXPECT_EQ(result.code, 1);
  EXPECT_NE(result.err.find("TimeoutError"), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("rank 1"), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("127.0.0.1:" + port), std::string::npos) << result.err;
}

}  // namespace
}  // namespace collx
