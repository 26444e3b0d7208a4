// collx-test-worker: a rank for the process tests, bootstrapped from the environment.
//
//   collx-test-worker loop COUNT ITERATIONS   allreduce float32 COUNT elements ITERATIONS
//                                             times (0: until killed), checking every result;
//                                             prints "ready" after the first one
//                                             (TEST_WORKER_DIRECT=1: a shm broadcast of
//                                             COUNT float32 from rank i % P and a shm
//                                             allgather of COUNT float32 before each)
//   collx-test-worker count COUNT             one allreduce of COUNT float32 elements
//   collx-test-worker message BYTES           rank 0 sends one message of BYTES bytes to the
//                                             last rank, which checks every byte
//   collx-test-worker sweep MAXCOUNT          every allreduce algorithm x dtype x op x count
//                                             (0, 1, P-1, odd, MAXCOUNT), then allgather,
//                                             broadcast and barrier, against the references
//   collx-test-worker hang COUNT K            K allreduces of COUNT float32 (after each of
//                                             which it prints "call N done"); in call K-1
//                                             rank TEST_WORKER_HANG_RANK does
//                                             TEST_WORKER_HANG_CASE instead: "skip" (skips
//                                             it, then sleeps 60 s holding the context),
//                                             "sleep" (sleeps 60 s before it, in user code),
//                                             "other" (every call K-1 is a binomial reduce to
//                                             rank 0 but this rank's, a binomial broadcast),
//                                             "stop" (stops itself with SIGSTOP), "kill"
//                                             (sleeps 3.5 s, then dies of SIGKILL); a rank
//                                             that gets through all K sleeps 60 s after
//   collx-test-worker recover COUNT           allreduces of COUNT float32 until one fails
//                                             ("ready" after the first; then "failed at
//                                             UNIX-SECONDS: ..."),
//                                             then agree() with its bit cleared: prints
//                                             "agreed flags=HEX failed=R,R in N ms"
//   collx-test-worker agree COUNT             the same agree() at once ("ready" first),
//                                             rank TEST_WORKER_HANG_RANK 60 s late
//   collx-test-worker elastic COUNT SECONDS   checked allreduces of COUNT float32 for
//                                             SECONDS (the ranks stop together): after a
//                                             failure the survivors shrink and go on
//                                             ("shrunk size=S generation=G"; at the end
//                                             "done size=S generation=G calls=N")
//   collx-test-worker replace COUNT SECONDS   as elastic, but after a failure every
//                                             survivor calls reform() (up to 10 s for a
//                                             newcomer: collx-run --on-failure replace
//                                             starts one, which init() joins):
//                                             "reformed size=S generation=G joined=J
//                                             in N ms"; a newcomer prints "joined rank=R
//                                             size=S generation=G" first
//   collx-test-worker shrink COUNT            as recover, then shrink() and a checked
//                                             1 MiB allreduce on the new context: prints
//                                             "shrunk rank=R size=S generation=G
//                                             (shrink S ms) recovered in N ms" (from
//                                             the failed call's end; the check is not
//                                             timed)
//
// Exit codes name the outcome: 0 ok, 10 IoError, 11 TimeoutError, 12 MismatchError,
// 13 Aborted, 14 InvalidArgument, 15 another collx error, 16 RevokedError, 17 ExcludedError,
// 20 a wrong result, 2 usage. The error's message goes to stderr.
//
// Test knobs (environment): TEST_WORKER_DENY_CMA=1 makes process_vm_readv fail with EPERM
// in this process (a seccomp filter, as container runtimes install), before collx starts;
// TEST_WORKER_DESCRIBE=1 prints "peer R: <connection>" for every peer after joining.
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "collx/collx.h"
#include "util/reference.h"
#include "util/test_util.h"

namespace {

int codeOf(const collx::Error& e) {
  switch (e.kind()) {
    case collx::ErrorKind::kIo:
      return 10;
    case collx::ErrorKind::kTimeout:
      return 11;
    case collx::ErrorKind::kMismatch:
      return 12;
    case collx::ErrorKind::kAborted:
      return 13;
    case collx::ErrorKind::kInvalidArgument:
      return 14;
    case collx::ErrorKind::kRevoked:
      return 16;
    case collx::ErrorKind::kExcluded:
      return 17;
    default:
      return 15;
  }
}

// Returns the first wrong result as text ("" when all are right).
std::string sweep(collx::Context& ctx, std::uint64_t maxCount) {
  using namespace collx;
  const int P = ctx.size(), rank = ctx.rank();
  std::vector<std::uint64_t> counts = {0, 1, static_cast<std::uint64_t>(P > 1 ? P - 1 : 2), 1001,
                                       maxCount};
  for (const char* algorithm : {"ring", "ring_chunked", "halving_doubling", "recursive_doubling"}) {
    for (std::uint64_t count : counts) {
      for (DataType type : kAllDataTypes) {
        std::vector<ReduceOpKind> ops = {ReduceOpKind::kSum, ReduceOpKind::kProd,
                                         ReduceOpKind::kMin, ReduceOpKind::kMax,
                                         ReduceOpKind::kAvg};
        if (isInteger(type)) ops.insert(ops.end(), {ReduceOpKind::kBand, ReduceOpKind::kBxor});
        for (ReduceOpKind op : ops) {
          auto in = test::makeInput(rank, count, type, op);
          std::vector<std::uint8_t> out(in.size());
          AllreduceOptions o;
          o.op = op;
          o.algorithm = algorithm;
          allreduce(ctx, in.data(), out.data(), count, type, o);
          auto expected = test::expectedReduction(P, count, type, op);
          std::int64_t bad = test::firstDifference(out, expected, type);
          if (bad >= 0) {
            return std::string("allreduce ") + algorithm + " " + dataTypeName(type) + " " +
                   reduceOpKindName(op) + " count " + std::to_string(count) + ": element " +
                   std::to_string(bad) + " wrong";
          }
        }
      }
    }
  }
  for (std::uint64_t count : counts) {
    auto mine = test::makeInput(rank, count, DataType::kInt32, ReduceOpKind::kSum);
    std::vector<std::uint8_t> all(mine.size() * P);
    allgather(ctx, mine.data(), all.data(), count, DataType::kInt32);
    for (int r = 0; r < P; ++r) {
      auto theirs = test::makeInput(r, count, DataType::kInt32, ReduceOpKind::kSum);
      if (!std::equal(theirs.begin(), theirs.end(), all.begin() + r * mine.size())) {
        return "allgather count " + std::to_string(count) + ": block " + std::to_string(r);
      }
    }
    for (const char* algorithm : {"one_to_all", "binomial", "shm"}) {
      if (std::string(algorithm) == "shm" && !ctx.sharedMemory()) continue;
      const int root = P - 1;
      auto expected = test::makeInput(root, count, DataType::kFloat64, ReduceOpKind::kSum);
      auto buffer = rank == root ? expected : std::vector<std::uint8_t>(expected.size(), 0);
      CollectiveOptions o;
      o.algorithm = algorithm;
      broadcast(ctx, buffer.data(), count, DataType::kFloat64, root, o);
      if (buffer != expected) return std::string("broadcast ") + algorithm;
    }
  }
  // The shm broadcast's direct reads (from 64 KiB; COLLX_SHM_DIRECT), from every root, twice
  // (auto: the group buffers first, then direct reads). (The allgathers above from 16 KiB
  // gathered may read directly too.)
  if (ctx.sharedMemory()) {
    for (std::uint64_t bytes : {std::uint64_t{65536}, std::uint64_t{300007}}) {
      for (int root = 0; root < P; ++root) {
        for (int time = 0; time < 2; ++time) {
          std::vector<std::uint8_t> expected(bytes);
          test::patternBytes(static_cast<std::uint64_t>(root * 2 + time), 0, expected.data(),
                             bytes);
          auto buffer = rank == root ? expected : std::vector<std::uint8_t>(bytes, 0);
          CollectiveOptions o;
          o.algorithm = "shm";
          broadcast(ctx, buffer.data(), bytes, DataType::kUint8, root, o);
          if (buffer != expected) {
            return "broadcast shm of " + std::to_string(bytes) + " bytes from rank " +
                   std::to_string(root);
          }
        }
      }
    }
  }
  for (const char* algorithm : {"all_to_all", "all_to_one", "dissemination"}) {
    CollectiveOptions o;
    o.algorithm = algorithm;
    barrier(ctx, o);
  }
  return "";
}

// process_vm_readv and process_vm_writev fail with EPERM from now on (x86-64 and aarch64).
bool denyCrossMemoryAttach() {
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_readv, 1, 0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_writev, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog program{static_cast<unsigned short>(sizeof(filter) / sizeof(filter[0])), filter};
  return ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
         ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) == 0;
}

bool knob(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && std::strcmp(value, "1") == 0;
}

// The "hang" mode (see the top): the others' calls wait for a rank that does something else.
int hang(collx::Context& ctx, std::uint64_t count, int calls) {
  const char* rankText = std::getenv("TEST_WORKER_HANG_RANK");
  const char* caseText = std::getenv("TEST_WORKER_HANG_CASE");
  const int odd = rankText != nullptr ? std::atoi(rankText) : -1;
  const std::string what = caseText != nullptr ? caseText : "";
  std::vector<float> v(count, 1.0f), out(count);
  std::printf("ready\n");
  std::fflush(stdout);
  for (int call = 0; call < calls; ++call) {
    const bool last = call == calls - 1;
    if (last && ctx.rank() == odd) {
      if (what == "skip") {
        std::this_thread::sleep_for(std::chrono::seconds(60));
        return 0;
      }
      if (what == "sleep") std::this_thread::sleep_for(std::chrono::seconds(60));
      if (what == "stop") raise(SIGSTOP);
      if (what == "kill") {
        std::this_thread::sleep_for(std::chrono::milliseconds(3500));
        raise(SIGKILL);
      }
    }
    if (last && what == "other") {
      collx::AllreduceOptions o;
      o.algorithm = "binomial";
      if (ctx.rank() == odd) {
        collx::CollectiveOptions b;
        b.algorithm = "binomial";
        collx::broadcast(ctx, v.data(), count, collx::DataType::kFloat32, 0, b);
      } else {
        collx::reduce(ctx, v.data(), out.data(), count, collx::DataType::kFloat32, 0, o);
      }
    } else {
      collx::allreduce(ctx, v.data(), out.data(), count, collx::DataType::kFloat32);
    }
    std::printf("call %d done\n", call);
    std::fflush(stdout);
  }
  // A rank that got through stays in the job (the others' report says so) until killed.
  if (!what.empty()) std::this_thread::sleep_for(std::chrono::seconds(60));
  return 0;
}

// allreduces of COUNT float32 until one fails (prints "ready" after the first, then the
// error), then agrees with every rank's bit cleared and prints the answer.
// After the failure, mode "shrink" shrinks instead, then allreduces 1 MiB on the new context
// and checks it after a barrier: prints "shrunk rank=R size=S generation=G (shrink S ms)
// recovered in N ms" (S and N from the failed call's end, to shrink()'s return and the
// allreduce's). The 1 MiB (`prepared`: this rank's rank before the failure, plus i % 3) was
// filled before the failure, so that nothing but the library runs in the timed span, as in
// benchmarks/compare/ulfm_shrink.c.
int shrinkAndGoOn(collx::Context& ctx, std::chrono::steady_clock::time_point failed,
                  std::vector<float>& prepared) {
  const std::int32_t before = ctx.rank();
  auto next = ctx.shrink();
  const auto shrunk = std::chrono::steady_clock::now();
  const std::uint64_t n = prepared.size();
  collx::allreduce(*next, prepared.data(), prepared.data(), n, collx::DataType::kFloat32);
  const auto done = std::chrono::steady_clock::now();  // (the check below is not timed)
  // The survivors check their sums once every one of them has its own (as ulfm_shrink.c
  // meets in a barrier before it exits): a survivor done early would otherwise take the CPU
  // that the last ones still need for the timed allreduce, where ranks outnumber cores.
  collx::barrier(*next);
  const int P = next->size();
  std::int32_t survivors = before;  // the sum of the survivors' ranks before the failure
  collx::allreduce(*next, &survivors, &survivors, 1, collx::DataType::kInt32);
  for (std::uint64_t i = 0; i < n; ++i) {
    const float expected = static_cast<float>(survivors + P * static_cast<int>(i % 3));
    if (prepared[i] != expected) {
      std::fprintf(stderr, "rank %d: element %llu is %g after shrink, expected %g\n", next->rank(),
                   static_cast<unsigned long long>(i), prepared[i], expected);
      return 20;
    }
  }
  const auto ms = [](std::chrono::steady_clock::duration d) {
    return std::chrono::duration<double, std::milli>(d).count();
  };
  std::printf("shrunk rank=%d size=%d generation=%lld (shrink %.1f ms) recovered in %.1f ms\n",
              next->rank(), next->size(), static_cast<long long>(next->generation()),
              ms(shrunk - failed), ms(done - failed));
  return 0;
}

// allreduces of COUNT float32, checked, for SECONDS (the ranks vote in each call whether
// the time is up, in one element more, and stop together): after every failure the
// survivors shrink (again, when a survivor is lost meanwhile) and count from 0 on the new
// context. Prints "ready" after the first call, "shrunk size=S generation=G" after each
// shrink, "done size=S generation=G calls=N" at the end.
int elastic(std::shared_ptr<collx::Context> ctx, std::uint64_t count, long seconds, bool replace) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  std::vector<float> v(count + 1);
  bool ready = false;
  long calls = 0;
  for (long it = 0;;) {
    try {
      const int P = ctx->size();
      const float scale = static_cast<float>(it % 7 + 1);
      for (std::uint64_t i = 0; i < count; ++i) {
        v[i] = static_cast<float>(ctx->rank() + 1) * scale + static_cast<float>(i % 3);
      }
      v[count] = std::chrono::steady_clock::now() >= until ? 1.0f : 0.0f;
      collx::allreduce(*ctx, v.data(), v.data(), count + 1, collx::DataType::kFloat32);
      for (std::uint64_t i = 0; i < count; ++i) {
        const float expected =
            static_cast<float>(P * (P + 1) / 2) * scale + static_cast<float>(P * (i % 3));
        if (v[i] != expected) {
          std::fprintf(stderr,
                       "rank %d of %d, generation %lld, call %ld: element %llu is %g, "
                       "expected %g\n",
                       ctx->rank(), P, static_cast<long long>(ctx->generation()), it,
                       static_cast<unsigned long long>(i), v[i], expected);
          return 20;
        }
      }
      ++it;
      ++calls;
      if (!ready) {
        ready = true;
        std::printf("ready\n");
        std::fflush(stdout);
      }
      if (v[count] > 0) break;  // some rank's time is up: every rank stops after this call
    } catch (const collx::ExcludedError&) {
      throw;
    } catch (const collx::Error& e) {
      // Every survivor shrinks (or re-forms); one lost meanwhile makes every one of them try
      // again.
      const auto failed = std::chrono::steady_clock::now();
      std::size_t joined = 0;
      for (int attempt = 1;; ++attempt) {
        try {
          if (replace) {
            collx::Reformed reformed = ctx->reform(std::nullopt, std::chrono::seconds(10));
            ctx = reformed.context;
            joined = reformed.joined.size();
          } else {
            ctx = ctx->shrink();
          }
          break;
        } catch (const collx::IoError&) {
          if (attempt == 5) throw;
        }
      }
      it = 0;
      if (replace) {
        std::printf("reformed size=%d generation=%lld joined=%zu in %lld ms\n", ctx->size(),
                    static_cast<long long>(ctx->generation()), joined,
                    static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                               std::chrono::steady_clock::now() - failed)
                                               .count()));
      } else {
        std::printf("shrunk size=%d generation=%lld\n", ctx->size(),
                    static_cast<long long>(ctx->generation()));
      }
      std::fflush(stdout);
    }
  }
  std::printf("done size=%d generation=%lld calls=%ld\n", ctx->size(),
              static_cast<long long>(ctx->generation()), calls);
  return 0;
}

// (mode "agree": no allreduce; rank TEST_WORKER_HANG_RANK sleeps 60 s first, alive.)
int recover(collx::Context& ctx, std::uint64_t count, bool agreeOnly, bool shrink) {
  std::vector<float> v(std::max<std::uint64_t>(count, 1), 1.0f);
  std::vector<float> prepared(shrink ? std::size_t{1} << 18 : 0);  // 1 MiB for after the shrink
  for (std::size_t i = 0; i < prepared.size(); ++i) {
    prepared[i] = static_cast<float>(ctx.rank() + static_cast<int>(i % 3));
  }
  auto started = std::chrono::steady_clock::now();
  if (agreeOnly) {
    const char* late = std::getenv("TEST_WORKER_HANG_RANK");
    std::printf("ready\n");
    std::fflush(stdout);
    if (late != nullptr && std::atoi(late) == ctx.rank()) {
      std::this_thread::sleep_for(std::chrono::seconds(60));
    }
  }
  try {
    for (long it = 0; !agreeOnly; ++it) {
      collx::allreduce(ctx, v.data(), v.data(), count, collx::DataType::kFloat32);
      if (it == 0) {
        std::printf("ready\n");
        std::fflush(stdout);
      }
    }
  } catch (const collx::Error& e) {
    started = std::chrono::steady_clock::now();
    // (the wall clock too: benchmarks/recovery/figures.sh's "stop" times the detection from
    // the stopped rank's COLLX_FAULT line)
    const double at =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    std::printf("failed at %.6f: %s: %s\n", at, collx::errorKindName(e.kind()), e.what());
    std::fflush(stdout);
  }
  if (shrink) return shrinkAndGoOn(ctx, started, prepared);
  const collx::Agreement a = ctx.agree(~(std::uint64_t{1} << ctx.rank()));
  std::string failed, causes;
  for (int r : a.failed) failed += (failed.empty() ? "" : ",") + std::to_string(r);
  for (const collx::FailedRank& f : a.causes) {
    causes += (causes.empty() ? "" : ",") + std::to_string(f.rank) + ":" +
              collx::failureCauseName(f.cause);
  }
  std::printf("agreed flags=%llx failed=%s in %lld ms causes=%s\n",
              static_cast<unsigned long long>(a.flags), failed.c_str(),
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                         std::chrono::steady_clock::now() - started)
                                         .count()),
              causes.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: collx-test-worker loop COUNT ITERATIONS | count COUNT\n");
    return 2;
  }
  std::string mode = argv[1];
  const std::uint64_t count = std::stoull(argv[2]);
  const long iterations = mode == "loop" && argc > 3 ? std::stol(argv[3]) : 1;
  if (knob("TEST_WORKER_DENY_CMA") && !denyCrossMemoryAttach()) {
    std::fprintf(stderr, "collx-test-worker: cannot install the seccomp filter: %s\n",
                 std::strerror(errno));
    return 2;
  }
  try {
    const auto initStarted = std::chrono::steady_clock::now();
    auto ctx = collx::init();
    const auto initMs = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::steady_clock::now() - initStarted)
                            .count();
    const int P = ctx->size();
    if (knob("TEST_WORKER_DESCRIBE")) {
      for (int peer = 0; peer < P; ++peer) {
        std::printf("peer %d: %s\n", peer, ctx->describePeer(peer).c_str());
      }
      std::fflush(stdout);
    }
    if (mode == "message") {
      collx::test::LargeBuffer buffer(count);
      auto* bytes = buffer.data<std::uint8_t>();
      if (ctx->rank() == 0) {
        collx::test::patternBytes(7, 0, bytes, count);
        collx::send(*ctx, bytes, count, collx::DataType::kUint8, P - 1, 7);
      } else if (ctx->rank() == P - 1) {
        collx::recv(*ctx, bytes, count, collx::DataType::kUint8, 0, 7);
        const std::int64_t bad = collx::test::firstPatternMismatch(bytes, count, 7);
        if (bad >= 0) {
          std::fprintf(stderr, "rank %d: byte %lld is wrong\n", ctx->rank(),
                       static_cast<long long>(bad));
          return 20;
        }
      }
      std::printf("message ok\n");
      return 0;
    }
    if (mode == "sweep") {
      std::string wrong = sweep(*ctx, count);
      if (!wrong.empty()) {
        std::fprintf(stderr, "rank %d: %s\n", ctx->rank(), wrong.c_str());
        return 20;
      }
      std::printf("sweep ok\n");
      return 0;
    }
    if (mode == "hang") return hang(*ctx, count, argc > 3 ? std::stoi(argv[3]) : 2);
    if (mode == "elastic" || mode == "replace") {
      if (mode == "replace" && knob("COLLX_JOIN")) {
        std::printf("joined rank=%d size=%d generation=%lld in %lld ms\n", ctx->rank(), ctx->size(),
                    static_cast<long long>(ctx->generation()), static_cast<long long>(initMs));
        std::fflush(stdout);
      }
      return elastic(ctx, count, argc > 3 ? std::stol(argv[3]) : 5, mode == "replace");
    }
    if (mode == "recover" || mode == "agree" || mode == "shrink") {
      return recover(*ctx, count, mode == "agree", mode == "shrink");
    }
    std::vector<float> v(count);
    const bool direct = knob("TEST_WORKER_DIRECT") && ctx->sharedMemory();
    std::vector<float> all(direct ? count * static_cast<std::uint64_t>(P) : 0);
    for (long it = 0; iterations == 0 || it < iterations; ++it) {
      if (direct) {  // a shm broadcast from rank it % P and a shm allgather first
        const int root = static_cast<int>(it % P);
        for (std::uint64_t i = 0; i < count; ++i) v[i] = ctx->rank() == root ? float(i % 13) : -1;
        collx::CollectiveOptions o;
        o.algorithm = "shm";
        collx::broadcast(*ctx, v.data(), count, collx::DataType::kFloat32, root, o);
        for (std::uint64_t i = 0; i < count; ++i) {
          if (v[i] != float(i % 13)) {
            std::fprintf(stderr, "rank %d: broadcast element %llu is %g\n", ctx->rank(),
                         static_cast<unsigned long long>(i), v[i]);
            return 20;
          }
        }
        for (std::uint64_t i = 0; i < count; ++i) v[i] = float(ctx->rank() * 100 + i % 11);
        collx::allgather(*ctx, v.data(), all.data(), count, collx::DataType::kFloat32, o);
        for (std::uint64_t i = 0; i < all.size(); ++i) {
          if (all[i] != float(i / count * 100 + i % count % 11)) {
            std::fprintf(stderr, "rank %d: allgather element %llu is %g\n", ctx->rank(),
                         static_cast<unsigned long long>(i), all[i]);
            return 20;
          }
        }
      }
      for (std::uint64_t i = 0; i < count; ++i) v[i] = static_cast<float>(ctx->rank() + i % 7);
      collx::allreduce(*ctx, v.data(), v.data(), count, collx::DataType::kFloat32);
      for (std::uint64_t i = 0; i < count; ++i) {
        float expected = static_cast<float>(P * (P - 1) / 2 + P * static_cast<int>(i % 7));
        if (v[i] != expected) {
          std::fprintf(stderr, "rank %d: element %llu is %g, expected %g\n", ctx->rank(),
                       static_cast<unsigned long long>(i), v[i], expected);
          return 20;
        }
      }
      if (it == 0) {
        std::printf("ready\n");
        std::fflush(stdout);
      }
    }
    std::printf("done\n");
    return 0;
  } catch (const collx::Error& e) {
    std::fprintf(stderr, "collx-test-worker: %s: %s\n", collx::errorKindName(e.kind()), e.what());
    return codeOf(e);
  }
}
