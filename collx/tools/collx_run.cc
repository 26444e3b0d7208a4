// collx-run: the launcher. Starts the TCP store (on node 0) or uses the one given, spawns
// the local ranks with COLLX_* set, tags their output, forwards signals, and fails the job
// as a whole when a rank fails.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <random>
#include <thread>

#include "cli.h"
#include "collx/base/hex.h"
#include "collx/collx.h"
#include "collx/rendezvous/signed_store.h"
#include "collx/secure/job_secret.h"
#include "collx/secure/tls.h"
#include "collx/settings.h"
#include "collx/transport/shm_segments.h"
#include "launcher.h"

namespace {

constexpr const char* kAbout =
    R"(Runs P ranks of `program` on this node, with COLLX_RANK, COLLX_WORLD_SIZE,
COLLX_LOCAL_RANK, COLLX_STORE and COLLX_JOB_ID set for collx::init(). Starts a TCP
store for them (on node 0) unless --store names one. As torchrun does, it also sets
RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK (the node's index),
MASTER_ADDR and MASTER_PORT (where torch's rank 0 starts torch's own store, see
--torch-port), so that an unchanged torch script's init_process_group("collx")
runs under it (collx itself reads the COLLX_* ones). When a rank fails, the others
are stopped (SIGTERM, then SIGKILL after the grace period) and collx-run exits with
the failing rank's code (128+N when it died of signal N). Shared-memory arenas that
killed ranks left in /dev/shm are removed when they exit (and, at start, those of
any earlier rank on this host that no longer runs). SIGINT, SIGTERM, SIGHUP
and SIGQUIT are forwarded to every rank. SIGUSR1 is forwarded to the ranks' processes
that handle it (collx ranks: each makes a hang report, which the rank that finds a call
in flight logs) and the job goes on. With several nodes, node 0 keeps the store
up until every node's ranks have finished (at most 10 minutes after its own).
Any program works:
    collx-run -n 4 -- sh -c 'echo $COLLX_RANK'
)";

constexpr const char* kFooter =
    R"(exit codes: 0 all ranks succeeded; the failing rank's code; 124 timeout;
128+N collx-run received signal N; 2 bad arguments; 127 program not found.
)";

// How long node 0 keeps the store up for nodes whose ranks are still running.
constexpr std::chrono::minutes kStoreLinger(10);
// How long after the job's --timeout (and grace) node 0 keeps the store for the other nodes.
constexpr std::chrono::seconds kNodeSlack(10);

struct Args {
  int nproc = 0;
  int nnodes = 1;
  int nodeRank = 0;
  std::string masterAddr;
  int masterPort = 29400;
  int torchPort = 0;  // 0: chosen (see --torch-port)
  std::string store;
  std::string jobId;
  std::optional<std::chrono::milliseconds> timeout;
  std::chrono::milliseconds grace{5000};
  bool tag = false;
  std::string bind = "auto";
  std::string onFailure = "stop";
  int maxReplacements = 3;
  std::string secretFile;
  std::shared_ptr<const collx::secure::JobSecret> fileSecret;  // read from secretFile
  bool insecure = false;
  std::vector<std::string> command;
};

// mpirun's spelling "-np P" for -n P: CLI11 would read it as -n with the value "p". Only the
// options before the program are looked at (a program's own -np stays as it is).
void acceptMpirunSpelling(CLI::App& app, int argc, char** argv) {
  static char nproc[] = "--nproc";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--" || arg.size() < 2 || arg[0] != '-') return;  // the program starts
    if (arg == "-np") {
      argv[i] = nproc;
      ++i;  // its value
      continue;
    }
    if (arg.find('=') != std::string::npos) continue;  // --name=value
    const CLI::Option* option = app.get_option_no_throw(arg[1] == '-' ? arg : arg.substr(0, 2));
    const bool attached = arg[1] != '-' && arg.size() > 2;  // -n4
    if (option != nullptr && option->get_items_expected_min() > 0 && !attached) ++i;
  }
}

Args parseArgs(int argc, char** argv, collx::cli::CommandLine& cli) {
  Args args;
  cli.integer("-n,--nproc", args.nproc, 1, 1 << 16, "P",
              "ranks on this node (required, >= 1; also -np P)");
  cli.integer("--nnodes", args.nnodes, 1, 1 << 16, "N",
              "nodes in the job (default 1); start one collx-run per node");
  cli.integer("--node-rank", args.nodeRank, 0, 1 << 16, "I",
              "this node's index in [0, N) (default 0); its ranks are I*P .. I*P+P-1 of N*P");
  cli.text("--master-addr", args.masterAddr, "HOST",
           "with --nnodes > 1: the address of node 0, reachable from every node; node 0 starts "
           "the store there");
  cli.integer("--master-port", args.masterPort, 1, 65535, "PORT",
              "with --nnodes > 1: the store's port (default 29400)");
  cli.integer("--torch-port", args.torchPort, 1, 65535, "PORT",
              "MASTER_PORT for the ranks: where torch.distributed's rank 0 starts torch's own "
              "TCPStore (env://), apart from collx's store. Default: a port free at start on "
              "node 0. With several nodes, node 0 picks it (and MASTER_ADDR: --master-addr, else "
              "its address toward the store) and shares both through the store, so every node "
              "sets the same");
  cli.text("--store", args.store, "URL",
           "use this store instead of starting one: tcp://host:port, file:///shared/dir (a job "
           "directory inside it is removed at the end on one node) or redis://host:port[/db]");
  cli.text("--job-id", args.jobId, "ID",
           "job id (default: COLLX_JOB_ID, else a fresh random id that node 0 shares through the "
           "store)");
  cli.text("--secret-file", args.secretFile, "FILE",
           "the job's secret: a file whose first line is it, that only its owner can read "
           "(chmod 600), on a filesystem every node shares; the ranks get its path as "
           "COLLX_JOB_SECRET_FILE. Default: COLLX_JOB_SECRET or COLLX_JOB_SECRET_FILE if set, "
           "else a fresh secret for a job on one node (given to the ranks in their "
           "environment, never on a command line); a job on several nodes needs one");
  cli.flag("--insecure", args.insecure,
           "run the job without a secret: anyone who can reach its store or its ranks' ports "
           "can join it (every rank warns)");
  cli.duration("--timeout", args.timeout, "T",
               "stop the job after T (e.g. 90s, 10m; a number is seconds); exit code 124. With "
               "--nnodes, node 0 keeps the store for the other nodes until T + --grace + 10 s "
               "at most (without --timeout: 10 min)");
  cli.duration("--grace", args.grace, "T", "wait T between SIGTERM and SIGKILL (default 5s)");
  cli.flag("-t,--tag-output", args.tag, "prefix every line the ranks print with \"[rank] \"");
  cli.text("--bind", args.bind, "MODE",
           "core: bind local rank i to the i-th CPU collx-run may use; spread: to CPU i mod N of "
           "those N CPUs (ranks outnumbering CPUs share them evenly; unbound, the kernel may "
           "leave 3 of 4 ranks on one of 2 CPUs, since waiting ranks yield but never idle); "
           "none: leave placement to the kernel; auto (default): with one node and "
           "COLLX_TRANSPORT not tcp, core when the ranks fit the CPUs, else spread (shared "
           "memory's latency is a cache line's trip between two fixed cores), otherwise (and "
           "for a lone rank) none")
      ->check(CLI::IsMember({"auto", "core", "spread", "none"}));
  cli.text("--on-failure", args.onFailure, "WHAT",
           "stop (default): when a rank fails, stop the others and exit with its code; "
           "continue: the others go on without it (a program that shrinks its context, "
           "Context::shrink, carries on), and collx-run exits 0 when any rank exited 0; "
           "replace: a rank that fails is started again (at most --max-replacements times in "
           "all, then as continue), with COLLX_JOIN=1, so that its collx::init() joins the "
           "running job in the failed rank's place, which the others take it into with "
           "Context::reform() (Python: ctx.reform()); needs a store that outlives any rank "
           "(collx-run's own, the default, or --store)")
      ->check(CLI::IsMember({"stop", "continue", "replace"}));
  cli.integer("--max-replacements", args.maxReplacements, 0, 1 << 20, "N",
              "with --on-failure replace: start at most N replacements in all (default 3)");
  cli.app().add_option("program", args.command, "the program and its arguments");
  cli.app().positionals_at_end();  // everything from the program on is the program's
  acceptMpirunSpelling(cli.app(), argc, argv);
  cli.parse(argc, argv);

  if (cli.app().count("--nproc") == 0) cli.fail("-n P (the number of ranks) is required");
  if (args.command.empty()) cli.fail("no program to run");
  if (args.nodeRank >= args.nnodes) {
    cli.fail("--node-rank " + std::to_string(args.nodeRank) + " is not below --nnodes " +
             std::to_string(args.nnodes));
  }
  if (args.nnodes > 1 && args.store.empty() && args.masterAddr.empty()) {
    cli.fail("--nnodes > 1 needs --master-addr (node 0's address) or --store");
  }
  if (args.insecure && !args.secretFile.empty()) {
    cli.fail("--insecure and --secret-file: choose one");
  }
  if (!args.secretFile.empty()) {
    std::error_code ec;
    const auto absolute = std::filesystem::absolute(args.secretFile, ec);
    if (!ec) args.secretFile = absolute.string();
    try {  // the same checks as the ranks', before they start
      args.fileSecret = collx::secure::JobSecret::fromConfig(
          collx::Config(collx::Config::Environment{{"COLLX_JOB_SECRET_FILE", args.secretFile}}));
    } catch (const collx::Error& e) {
      cli.fail("--secret-file: " + e.detail());
    }
  }
  if (!args.store.empty()) {
    try {
      collx::rendezvous::StoreUrl::parse(args.store);
    } catch (const collx::Error& e) {
      cli.fail("--store: " + e.detail());
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

// collx-run's own store: with a secret, what others can write is signed.
std::shared_ptr<collx::rendezvous::Store> openRunStore(
    const std::string& url, const collx::rendezvous::StoreOptions& options) {
  using namespace collx::rendezvous;
  return SignedStore::wrapIfNeeded(openStore(url, options), options.secret);
}

// The keys collx-run writes in the store of a job on several nodes. The one that gives node
// 0's job id to the others is found before the job id is known: with a secret its name is
// one only the secret's holders can tell, so that jobs sharing a store do not collide.
struct RunKeys {
  RunKeys(const std::string& jobId)
      : torchMaster(prefix(jobId) + "torch-master"), nodesDone(prefix(jobId) + "nodes-done") {}
  static std::string prefix(const std::string& jobId) { return "collx-run/" + jobId + "/"; }
  static std::string jobIdKey(const collx::secure::JobSecret* secret) {
    if (secret == nullptr) return "collx-run/job-id";
    const collx::secure::Tag tag = secret->mac(collx::secure::Purpose::kLauncher, {"job-id"});
    return "collx-run/" + collx::hexBytes(tag.data(), 8) + "/job-id";
  }
  std::string torchMaster;
  std::string nodesDone;
};

// With several nodes, node 0's store must outlive every node's ranks: each launcher records
// that its ranks are done, and the one hosting the store waits (bounded) for all of them. The
// last node erases collx-run's keys (the one hosting the store, if it is not the last, the
// counter after it). The wait ends at `deadline` (a job with --timeout: its end on every node,
// with their grace and some slack) or after kStoreLinger.
void awaitOtherNodes(const Args& args, const std::string& storeUrl, const std::string& jobId,
                     bool hostsStore, const std::shared_ptr<const collx::secure::JobSecret>& secret,
                     std::shared_ptr<const collx::secure::TlsContext> tls,
                     std::chrono::steady_clock::time_point deadline) {
  using namespace collx::rendezvous;
  const RunKeys keys(jobId);
  const std::string& key = keys.nodesDone;
  try {
    StoreOptions options;
    options.timeout = std::chrono::seconds(30);
    options.secret = secret;
    options.tls = std::move(tls);
    auto store = openRunStore(storeUrl, options);
    std::int64_t done = store->add(key, 1);
    if (done == args.nnodes) {
      store->erase(keys.torchMaster);
      store->erase(RunKeys::jobIdKey(secret.get()));
      // Node 0's store waits for the count before it stops; any other store loses it now.
      const bool hostWaits = args.store.empty() && !hostsStore;
      if (!hostWaits) store->erase(key);
      return;
    }
    if (!hostsStore) return;
    const auto started = std::chrono::steady_clock::now();
    deadline = std::min(deadline, started + kStoreLinger);
    while (done < args.nnodes) {
      sigset_t pending;
      sigpending(&pending);
      if (sigismember(&pending, SIGINT) || sigismember(&pending, SIGTERM)) return;
      if (std::chrono::steady_clock::now() >= deadline) {
        std::cerr << "collx-run: stopping the store although only " << done << " of " << args.nnodes
                  << " nodes have finished (waited "
                  << std::chrono::duration_cast<std::chrono::seconds>(
                         std::chrono::steady_clock::now() - started)
                         .count()
                  << " s" << (args.timeout ? ", until the job's --timeout" : "") << ")\n";
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      done = store->add(key, 0);
    }
    store->erase(key);
  } catch (const collx::Error& e) {
    std::cerr << "collx-run: could not tell the other nodes that node " << args.nodeRank
              << " is done: " << e.what() << "\n";
  }
}

// Where torch.distributed's env:// rendezvous meets (MASTER_ADDR, MASTER_PORT): rank 0 of the
// job starts a TCPStore there, on node 0.
struct TorchMaster {
  std::string addr;
  int port = 0;
};

// A TCP port nothing listens on now, on every interface of this host. Released at once:
// torch's rank 0 binds it moments later (torchrun's agent does the same).
int unusedPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in any{};
  any.sin_family = AF_INET;
  any.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof(any);
  const bool ok = fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&any), len) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&any), &len) == 0;
  if (fd >= 0) ::close(fd);
  if (!ok) {
    throw collx::IoError(collx::Where{-1, "collx-run", -1},
                         std::string("no free port for MASTER_PORT: ") + std::strerror(errno));
  }
  return ntohs(any.sin_port);
}

// This host's address as seen from `host` (the local end of the route to it: a connected UDP
// socket sends nothing), else the hostname.
std::string addressToward(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  std::string address;
  if (!host.empty() && ::getaddrinfo(host.c_str(), "9", &hints, &found) == 0) {
    const int fd = ::socket(found->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    char text[INET6_ADDRSTRLEN] = {};
    if (fd >= 0 && ::connect(fd, found->ai_addr, found->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      const void* ip =
          local.ss_family == AF_INET6
              ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr)
              : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr);
      if (::inet_ntop(local.ss_family, ip, text, sizeof(text)) != nullptr) address = text;
    }
    if (fd >= 0) ::close(fd);
    ::freeaddrinfo(found);
  }
  if (address.empty()) {
    char name[256] = {};
    if (::gethostname(name, sizeof(name) - 1) == 0) address = name;
  }
  return address;
}

// One node: 127.0.0.1 and --torch-port or a free port. Several: node 0 decides (--master-addr,
// else its address toward the store; --torch-port, else a port free on node 0) and shares the
// pair through the store, so that every node's ranks meet at the same place.
TorchMaster torchMaster(const Args& args, const std::string& storeUrl, const std::string& jobId,
                        const collx::rendezvous::StoreOptions& storeOptions) {
  using namespace collx::rendezvous;
  if (args.nnodes == 1) return {"127.0.0.1", args.torchPort != 0 ? args.torchPort : unusedPort()};
  auto store = openRunStore(storeUrl, storeOptions);
  const std::string key = RunKeys(jobId).torchMaster;
  TorchMaster master;
  if (args.nodeRank == 0) {
    master.addr =
        !args.masterAddr.empty() ? args.masterAddr : addressToward(StoreUrl::parse(storeUrl).host);
    master.port = args.torchPort != 0 ? args.torchPort : unusedPort();
    store->set(key, std::to_string(master.port) + " " + master.addr);
    return master;
  }
  const std::string value = toString(store->get(key));  // "<port> <address>"
  const std::size_t space = value.find(' ');
  if (space == std::string::npos || space + 1 == value.size() || value.size() > 300) {
    throw collx::IoError(collx::Where{-1, "collx-run", -1},
                         "node 0's '" + key + "' in the store is not '<port> <address>'");
  }
  master.port = static_cast<int>(collx::parseInt(value.substr(0, space), 1, 65535, key));
  master.addr = value.substr(space + 1);
  return master;
}

int launch(const Args& args, const collx::cli::CommandLine& cli) {
  using namespace collx::rendezvous;
  std::string program = collx::run::findProgram(args.command[0]);
  if (program.empty()) {
    std::cerr << "collx-run: program '" << args.command[0] << "' not found"
              << (args.command[0].find('/') == std::string::npos ? " in PATH" : "")
              << " (or not executable)\n";
    return 127;
  }

  // The job's secret, for the ranks' environment: --secret-file's path, the secret collx-run
  // was given (the ranks inherit its variable), or one made here for a job on one node.
  // collx-run's own store (server and clients) asks for it too.
  std::vector<std::string> secretEnv;
  std::shared_ptr<const collx::secure::JobSecret> secret;
  const collx::Config& config = collx::Config::process();
  const bool given = config.env("COLLX_JOB_SECRET") || config.env("COLLX_JOB_SECRET_FILE");
  if (!args.secretFile.empty()) {
    secretEnv = {"COLLX_JOB_SECRET_FILE=" + args.secretFile, "COLLX_JOB_SECRET="};
    secret = args.fileSecret;
  } else if (given) {
    if (args.insecure) cli.fail("--insecure, but COLLX_JOB_SECRET(_FILE) is set: unset it");
    try {
      secret = collx::secure::JobSecret::fromConfig(config);
    } catch (const collx::Error& e) {
      cli.fail(e.detail());
    }
  } else if (args.insecure) {
    secretEnv = {"COLLX_INSECURE=1"};
  } else if (args.nnodes == 1 && args.store.rfind("tcp:", 0) == 0) {
    // Somebody else's TCP store: its server has the secret it was given, or none; the ranks
    // without one run unauthenticated (and say so).
  } else if (args.nnodes == 1) {
    const std::string text = collx::secure::newSecretText();
    secret = collx::secure::JobSecret::fromText(text, "collx-run's");
    secretEnv = {"COLLX_JOB_SECRET=" + text};
  } else {
    cli.fail(std::string("a job on several nodes needs the same secret on every node: make one "
                         "on a filesystem they share (") +
             collx::secure::kMakeSecretFile +
             ") and give each node's collx-run --secret-file ~/.collx-secret (or set "
             "COLLX_JOB_SECRET_FILE); --insecure runs it without one");
  }

  // TLS (COLLX_TLS=1, which the ranks inherit): collx-run's store serves in TLS too.
  std::shared_ptr<const collx::secure::TlsContext> tls;
  try {
    tls = collx::secure::TlsContext::fromConfig(config);
  } catch (const collx::Error& e) {
    cli.fail(e.detail());
  }

  // The store: given, or started here (node 0), or node 0's (other nodes).
  std::unique_ptr<TcpStoreServer> server;
  std::string storeUrl = args.store;
  StoreOptions storeOptions;
  storeOptions.secret = secret;
  storeOptions.tls = tls;
  if (storeUrl.empty()) {
    // 127.0.0.1, a free port; COLLX_STORE_MAX_VALUE and COLLX_STORE_IDLE_TIMEOUT
    auto options = TcpStoreServer::Options::fromConfig(collx::Config::process());
    options.secret = secret;
    options.tls = tls;
    // Every rank of a node comes from one address, all at once: the limits on handshakes
    // under way (which keep a flood of strangers from keeping the ranks out) take them all.
    // (A rank that still finds the store busy connects again, kHelloBusy.)
    const std::size_t world = static_cast<std::size_t>(args.nproc) * args.nnodes;
    options.maxPendingPerAddress =
        std::max(options.maxPendingPerAddress, static_cast<std::size_t>(args.nproc) + 16);
    options.maxPendingHandshakes = std::max(options.maxPendingHandshakes, world + 64);
    if (args.nnodes == 1) {
      server = std::make_unique<TcpStoreServer>(options);
      storeUrl = server->url();
    } else {
      if (args.nodeRank == 0) {
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
      auto store = openRunStore(storeUrl, storeOptions);
      const std::string key = RunKeys::jobIdKey(secret.get());
      if (args.nodeRank == 0) {
        jobId = randomJobId();
        store->set(key, jobId);
      } else {
        jobId = toString(store->get(key));
      }
    }
  }

  // A file store gets a job directory of its own, removed at the end (one node only).
  std::string removeDir;
  StoreUrl parsed = StoreUrl::parse(storeUrl);
  if (parsed.scheme == "file") {
    parsed.path += "/collx-run-" + jobId;
    storeUrl = parsed.str();
    FileStore made(parsed.path);  // for this user only (0700)
    if (args.nodeRank == 0) removeDir = parsed.path;
  }

  const TorchMaster torch = torchMaster(args, storeUrl, jobId, storeOptions);

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
  options.keepGoing = args.onFailure == "continue" || args.onFailure == "replace";
  options.replacements = args.onFailure == "replace" ? args.maxReplacements : 0;
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
    cli.fail("--bind core: " + std::to_string(args.nproc) + " ranks but only " +
             std::to_string(cpus.size()) + " CPUs to bind them to (--bind spread shares them)");
  }
  const bool bind = how != "none" && !cpus.empty();
  for (int local = 0; local < args.nproc; ++local) {
    int rank = args.nodeRank * args.nproc + local;
    options.ranks.push_back(collx::run::RankSpec{
        rank,
        {"COLLX_RANK=" + std::to_string(rank), "COLLX_WORLD_SIZE=" + std::to_string(world),
         "COLLX_LOCAL_RANK=" + std::to_string(local), "COLLX_STORE=" + storeUrl,
         "COLLX_JOB_ID=" + jobId,
         // torchrun's names (collx's own bootstrap prefers the COLLX_* ones above)
         "RANK=" + std::to_string(rank), "WORLD_SIZE=" + std::to_string(world),
         "LOCAL_RANK=" + std::to_string(local), "LOCAL_WORLD_SIZE=" + std::to_string(args.nproc),
         "GROUP_RANK=" + std::to_string(args.nodeRank), "MASTER_ADDR=" + torch.addr,
         "MASTER_PORT=" + std::to_string(torch.port)},
        bind ? cpus[static_cast<std::size_t>(local) % cpus.size()] : -1});
    auto& env = options.ranks.back().env;
    env.insert(env.end(), secretEnv.begin(), secretEnv.end());
  }
  const auto started = std::chrono::steady_clock::now();
  int code = collx::run::supervise(options);
  // Every rank has exited: what a killed one could not remove, we do.
  collx::transport::removeShmLeftovers(pids);
  if (args.nnodes > 1) {
    // The other nodes' launchers stop their ranks by their own --timeout (and grace): a
    // node that has not said it is done by then (and a little after) is not coming.
    const auto deadline = args.timeout ? started + *args.timeout + args.grace + kNodeSlack
                                       : std::chrono::steady_clock::time_point::max();
    awaitOtherNodes(args, storeUrl, jobId, server != nullptr, secret, tls, deadline);
  }
  if (!removeDir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(removeDir, ec);
  }
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  collx::run::blockHandledSignals();  // before the store server's thread exists
  collx::cli::CommandLine cli("collx-run", "collx-run -n P [options] [--] program [args...]",
                              kAbout, kFooter);
  Args args = parseArgs(argc, argv, cli);
  collx::warnUnknownVariables();
  try {
    return launch(args, cli);
  } catch (const collx::Error& e) {
    std::cerr << "collx-run: " << collx::errorKindName(e.kind()) << ": " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "collx-run: " << e.what() << "\n";
    return 1;
  }
}
