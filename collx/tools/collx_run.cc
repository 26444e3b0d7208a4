// collx-run: the launcher. Starts the TCP store (on node 0) or uses the one given, spawns
// the local ranks with COLLX_* set, tags their output, forwards signals, and fails the job
// as a whole when a rank fails.
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <random>
#include <thread>

#include "collx/collx.h"
#include "collx/transport/shm_segments.h"
#include "launcher.h"

namespace {

constexpr const char* kUsage = R"(usage: collx-run -n P [options] [--] program [args...]

Runs P ranks of `program` on this node, with COLLX_RANK, COLLX_WORLD_SIZE,
COLLX_LOCAL_RANK, COLLX_STORE and COLLX_JOB_ID set for collx::init(). Starts a TCP
store for them (on node 0) unless --store names one. When a rank fails, the others
are stopped (SIGTERM, then SIGKILL after the grace period) and collx-run exits with
the failing rank's code (128+N when it died of signal N). Shared-memory arenas that
killed ranks left in /dev/shm are removed when they exit (and, at start, those of
any earlier rank on this host that no longer runs). SIGINT, SIGTERM, SIGHUP
and SIGQUIT are forwarded to every rank. With several nodes, node 0 keeps the store
up until every node's ranks have finished (at most 10 minutes after its own).
Any program works:
    collx-run -n 4 -- sh -c 'echo $COLLX_RANK'

options:
  -n, --nproc P          ranks on this node (required, >= 1)
  --nnodes N             nodes in the job (default 1); start one collx-run per node
  --node-rank I          this node's index in [0, N) (default 0); its ranks are
                         I*P .. I*P+P-1 of N*P
  --master-addr HOST     with --nnodes > 1: the address of node 0, reachable from
                         every node; node 0 starts the store there
  --master-port PORT     with --nnodes > 1: the store's port (default 29400)
  --store URL            use this store instead of starting one: tcp://host:port,
                         file:///shared/dir (a job directory inside it is removed at
                         the end on one node) or redis://host:port[/db]
  --job-id ID            job id (default: COLLX_JOB_ID, else a fresh random id that
                         node 0 shares through the store)
  --timeout T            stop the job after T (e.g. 90s, 10m; a number is seconds);
                         exit code 124
  --grace T              wait T between SIGTERM and SIGKILL (default 5s)
  -t, --tag-output       prefix every line the ranks print with "[rank] "
  --bind MODE            core: bind local rank i to the i-th CPU collx-run may use;
                         spread: to CPU i mod N of those N CPUs (ranks outnumbering
                         CPUs share them evenly; unbound, the kernel may leave 3 of 4
                         ranks on one of 2 CPUs, since waiting ranks yield but never
                         idle); none: leave placement to the kernel; auto (default):
                         with one node and COLLX_TRANSPORT not tcp, core when the
                         ranks fit the CPUs, else spread (shared memory's latency is
                         a cache line's trip between two fixed cores), otherwise
                         (and for a lone rank) none
  -h, --help             this text

exit codes: 0 all ranks succeeded; the failing rank's code; 124 timeout;
128+N collx-run received signal N; 2 bad arguments; 127 program not found.
)";

// How long node 0 keeps the store up for nodes whose ranks are still running.
constexpr std::chrono::minutes kStoreLinger(10);

struct Args {
  int nproc = 0;
  int nnodes = 1;
  int nodeRank = 0;
  std::string masterAddr;
  int masterPort = 29400;
  std::string store;
  std::string jobId;
  std::optional<std::chrono::milliseconds> timeout;
  std::chrono::milliseconds grace{5000};
  bool tag = false;
  std::string bind = "auto";
  std::vector<std::string> command;
};

[[noreturn]] void usageError(const std::string& message) {
  std::cerr << "collx-run: " << message << "\n(see collx-run --help)\n";
  std::exit(2);
}

Args parseArgs(int argc, char** argv) {
  Args args;
  bool haveNproc = false;
  int i = 1;
  auto value = [&](const std::string& flag) -> std::string {
    if (i + 1 >= argc) usageError(flag + " needs a value");
    return argv[++i];
  };
  auto integer = [&](const std::string& flag, const std::string& text, long min, long max) {
    try {
      return static_cast<int>(collx::parseInt(text, min, max, flag));
    } catch (const collx::Error& e) {
      usageError(e.detail());
    }
  };
  auto duration = [&](const std::string& flag, const std::string& text) {
    try {
      auto d = collx::parseDuration(text, flag);
      if (d.count() <= 0) usageError(flag + " must be positive");
      return d;
    } catch (const collx::Error& e) {
      usageError(e.detail());
    }
  };
  for (; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg == "-h" || arg == "--help") {
      std::cout << kUsage;
      std::exit(0);
    } else if (arg == "-n" || arg == "--nproc" || arg == "-np") {
      args.nproc = integer("-n", value(arg), 1, 1 << 16);
      haveNproc = true;
    } else if (arg == "--nnodes") {
      args.nnodes = integer(arg, value(arg), 1, 1 << 16);
    } else if (arg == "--node-rank") {
      args.nodeRank = integer(arg, value(arg), 0, 1 << 16);
    } else if (arg == "--master-addr") {
      args.masterAddr = value(arg);
    } else if (arg == "--master-port") {
      args.masterPort = integer(arg, value(arg), 1, 65535);
    } else if (arg == "--store") {
      args.store = value(arg);
    } else if (arg == "--job-id") {
      args.jobId = value(arg);
    } else if (arg == "--timeout") {
      args.timeout = duration(arg, value(arg));
    } else if (arg == "--grace") {
      args.grace = duration(arg, value(arg));
    } else if (arg == "-t" || arg == "--tag-output") {
      args.tag = true;
    } else if (arg == "--bind") {
      args.bind = value(arg);
      if (args.bind != "auto" && args.bind != "core" && args.bind != "spread" &&
          args.bind != "none") {
        usageError("--bind must be auto, core, spread or none, got '" + args.bind + "'");
      }
    } else if (!arg.empty() && arg[0] == '-') {
      usageError("unknown option '" + arg + "'");
    } else {
      break;
    }
  }
  for (; i < argc; ++i) args.command.push_back(argv[i]);
  if (!haveNproc) usageError("-n P (the number of ranks) is required");
  if (args.command.empty()) usageError("no program to run");
  if (args.nodeRank >= args.nnodes) {
    usageError("--node-rank " + std::to_string(args.nodeRank) + " is not below --nnodes " +
               std::to_string(args.nnodes));
  }
  if (args.nnodes > 1 && args.store.empty() && args.masterAddr.empty()) {
    usageError("--nnodes > 1 needs --master-addr (node 0's address) or --store");
  }
  if (!args.store.empty()) {
    try {
      collx::rendezvous::StoreUrl::parse(args.store);
    } catch (const collx::Error& e) {
      usageError("--store: " + e.detail());
    }
  }
  return args;
}

std::string randomJobId() {
  std::random_device device;
  std::uniform_int_distribution<unsigned> digit(0, 15);
  std::string id = "run-";
  for (int k = 0; k < 12; ++k) id += "0123456789abcdef"[digit(device)];
  return id;
}

// With several nodes, node 0's store must outlive every node's ranks: each launcher records
// that its ranks are done, and the one hosting the store waits (bounded) for all of them.
void awaitOtherNodes(const Args& args, const std::string& storeUrl, const std::string& jobId,
                     bool hostsStore) {
  using namespace collx::rendezvous;
  const std::string key = "collx-run/" + jobId + "/nodes-done";
  try {
    StoreOptions options;
    options.timeout = std::chrono::seconds(30);
    auto store = openStore(storeUrl, options);
    std::int64_t done = store->add(key, 1);
    if (!hostsStore) return;
    const auto deadline = std::chrono::steady_clock::now() + kStoreLinger;
    while (done < args.nnodes) {
      sigset_t pending;
      sigpending(&pending);
      if (sigismember(&pending, SIGINT) || sigismember(&pending, SIGTERM)) return;
      if (std::chrono::steady_clock::now() >= deadline) {
        std::cerr << "collx-run: stopping the store although only " << done << " of " << args.nnodes
                  << " nodes have finished (waited "
                  << std::chrono::duration_cast<std::chrono::seconds>(kStoreLinger).count()
                  << " s)\n";
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      done = store->add(key, 0);
    }
  } catch (const collx::Error& e) {
    std::cerr << "collx-run: could not tell the other nodes that node " << args.nodeRank
              << " is done: " << e.what() << "\n";
  }
}

int launch(const Args& args) {
  using namespace collx::rendezvous;
  std::string program = collx::run::findProgram(args.command[0]);
  if (program.empty()) {
    std::cerr << "collx-run: program '" << args.command[0] << "' not found"
              << (args.command[0].find('/') == std::string::npos ? " in PATH" : "")
              << " (or not executable)\n";
    return 127;
  }

  // The store: given, or started here (node 0), or node 0's (other nodes).
  std::unique_ptr<TcpStoreServer> server;
  std::string storeUrl = args.store;
  if (storeUrl.empty()) {
    if (args.nnodes == 1) {
      server = std::make_unique<TcpStoreServer>();  // 127.0.0.1, a free port
      storeUrl = server->url();
    } else {
      if (args.nodeRank == 0) {
        TcpStoreServer::Options options;
        options.host = args.masterAddr.find(':') != std::string::npos ? "::" : "0.0.0.0";
        options.port = static_cast<std::uint16_t>(args.masterPort);
        server = std::make_unique<TcpStoreServer>(options);
      }
      storeUrl = tcpUrl(args.masterAddr, static_cast<std::uint16_t>(args.masterPort));
    }
  }

  // The job id: given, or from the environment, or made by node 0 and shared.
  std::string jobId = args.jobId;
  if (jobId.empty()) {
    if (const char* env = std::getenv("COLLX_JOB_ID")) jobId = env;
  }
  if (jobId.empty()) {
    if (args.nnodes == 1) {
      jobId = randomJobId();
    } else {
      auto store = openStore(storeUrl);
      if (args.nodeRank == 0) {
        jobId = randomJobId();
        store->set("collx-run/job-id", jobId);
      } else {
        jobId = toString(store->get("collx-run/job-id"));
      }
    }
  }

  // A file store gets a job directory of its own, removed at the end (one node only).
  std::string removeDir;
  StoreUrl parsed = StoreUrl::parse(storeUrl);
  if (parsed.scheme == "file") {
    parsed.path += "/collx-run-" + jobId;
    storeUrl = parsed.str();
    std::filesystem::create_directories(parsed.path);
    if (args.nodeRank == 0) removeDir = parsed.path;
  }

  // Shared-memory arenas whose owners were killed (a launcher killed with its ranks leaves
  // them): their pids are gone, so they can go too.
  collx::transport::removeShmLeftovers();

  collx::run::SuperviseOptions options;
  std::vector<int> pids;
  options.pids = &pids;
  options.programPath = program;
  options.argv = args.command;
  options.timeout = args.timeout;
  options.grace = args.grace;
  options.tagOutput = args.tag;
  const int world = args.nnodes * args.nproc;
  // The CPUs this process may use, in order: local rank i gets the i-th.
  std::vector<int> cpus;
  cpu_set_t allowed;
  if (::sched_getaffinity(0, sizeof(allowed), &allowed) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
    }
  }
  const char* transport = std::getenv("COLLX_TRANSPORT");
  std::string how = args.bind;
  if (how == "auto") {
    // (A lone rank talks to nobody over shared memory: bound, every such job would take the
    // first CPU.)
    const bool shm = args.nnodes == 1 && args.nproc > 1 &&
                     (transport == nullptr || std::string(transport) != "tcp");
    how = !shm ? "none" : args.nproc <= static_cast<int>(cpus.size()) ? "core" : "spread";
  }
  if (how == "core" && args.nproc > static_cast<int>(cpus.size())) {
    usageError("--bind core: " + std::to_string(args.nproc) + " ranks but only " +
               std::to_string(cpus.size()) + " CPUs to bind them to (--bind spread shares them)");
  }
  const bool bind = how != "none" && !cpus.empty();
  for (int local = 0; local < args.nproc; ++local) {
    int rank = args.nodeRank * args.nproc + local;
    options.ranks.push_back(collx::run::RankSpec{
        rank,
        {"COLLX_RANK=" + std::to_string(rank), "COLLX_WORLD_SIZE=" + std::to_string(world),
         "COLLX_LOCAL_RANK=" + std::to_string(local), "COLLX_STORE=" + storeUrl,
         "COLLX_JOB_ID=" + jobId},
        bind ? cpus[static_cast<std::size_t>(local) % cpus.size()] : -1});
  }
  int code = collx::run::supervise(options);
  // Every rank has exited: what a killed one could not remove, we do.
  collx::transport::removeShmLeftovers(pids);
  if (args.nnodes > 1) awaitOtherNodes(args, storeUrl, jobId, server != nullptr);
  if (!removeDir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(removeDir, ec);
  }
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  collx::run::blockHandledSignals();  // before the store server's thread exists
  Args args = parseArgs(argc, argv);
  try {
    return launch(args);
  } catch (const collx::Error& e) {
    std::cerr << "collx-run: " << collx::errorKindName(e.kind()) << ": " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "collx-run: " << e.what() << "\n";
    return 1;
  }
}
