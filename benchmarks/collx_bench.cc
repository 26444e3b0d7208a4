// collx-bench: sweeps message sizes for one collective and algorithm, under collx-run.
//
//   collx-run -n 4 collx-bench -c allreduce -a ring -b 4 -e 64M -f 4 -d float32 -o sum
//
// Per size: one checked call (#wrong counts the elements that differ from the reference on
// any rank), warmup, then iterations timed one by one (their number scaled to the size and
// agreed by all ranks). time = max over ranks of each rank's median; p50 and p99 are taken
// over the iterations, each iteration's time being the slowest rank's. Columns follow
// nccl-tests: algbw = bytes / time, busbw = algbw * (2(P-1)/P allreduce, (P-1)/P
// allgather(v), reduce_scatter, gather, scatter and alltoall, 1 broadcast and reduce), GB/s
// = 1e9 B/s. Sizes: allreduce, broadcast and reduce count the vector, the others the whole
// buffer of P blocks (allgather's and gather's result, reduce_scatter's input, scatter's
// input at the root, alltoall's send buffer). The v-collectives run equal blocks in rank
// order, to be compared with the collectives without the v.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <new>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli.h"
#include "collx/algorithms/registry.h"
#include "collx/algorithms/selection.h"
#include "collx/base/config.h"
#include "collx/base/units.h"
#include "collx/collx.h"

namespace {

// Buffers start on a page boundary, as large tensors and arrays do (and as the peers' buffers
// line up with each other: malloc gives each a fresh mapping, 16 bytes into its first page).
// (From std::vector<std::uint8_t>, buffers after the first sizes came from the heap at
// offsets 16 bytes apart within a page, so copies between them crossed cache lines and
// timed what no framework's tensors do.)
template <class T>
struct PageAligned {
  using value_type = T;
  PageAligned() = default;
  template <class U>
  PageAligned(const PageAligned<U>&) {}
  T* allocate(std::size_t n) {
    return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{4096}));
  }
  void deallocate(T* p, std::size_t) { ::operator delete (p, std::align_val_t{4096}); }
  template <class U>
  bool operator==(const PageAligned<U>&) const {
    return true;
  }
};
using Buffer = std::vector<std::uint8_t, PageAligned<std::uint8_t>>;

using Clock = std::chrono::steady_clock;
using collx::DataType;

constexpr const char* kAbout =
    R"(Sweeps message sizes for one collective and prints, per size: size, count, type, time
(us, max over ranks of the median), p50 and p99 (us), algbw and busbw (GB/s) and
#wrong (elements that differed from the reference on any rank; must be 0).
)";

constexpr const char* kFooter =
    R"(exit codes: 0 every result right; 3 some #wrong; 1 a collx error; 2 bad arguments.
)";

struct Args {
  std::string collective = "allreduce";
  std::string algorithm;
  collx::cli::SizeSweep sweep;
  std::vector<std::uint64_t> sizes;  // sweep.resolve()
  DataType dtype = DataType::kFloat32;
  collx::ReduceOpKind op = collx::ReduceOpKind::kSum;
  int root = 0;
  bool inPlace = false;
  bool markdown = false;  // -a list as docs/algorithms.md's tables
  int warmup = -1;
  int iters = -1;
  double minTime = 0.3;
  bool noCheck = false;
  std::string csv;
  std::string json;
  bool stats = false;
};

Args parseArgs(int argc, char** argv, collx::cli::CommandLine& cli) {
  Args a;
  cli.text("-c,--collective", a.collective, "NAME",
           "allreduce (default), allgather, broadcast, barrier, reduce_scatter, reduce, gather, "
           "scatter, alltoall, and allgatherv, gatherv, scatterv, alltoallv (equal blocks)");
  cli.text("-a,--algorithm", a.algorithm, "NAME",
           "an algorithm of that collective (default: chosen per size); \"list\" prints them");
  cli.flag("--markdown", a.markdown, "with -a list: docs/algorithms.md's tables instead");
  a.sweep.addOptions(cli);
  cli.dataType("--dtype,-d", a.dtype,
               "int8 uint8 int32 int64 float16 bfloat16 float32 (default) float64");
  cli.reduceOp("--op,-o", a.op, "sum (default) prod min max avg band bor bxor");
  cli.integer("--root,-r", a.root, 0, 1 << 24, "R",
              "root of broadcast, reduce, gather, scatter (default 0)");
  cli.flag("--in-place", a.inPlace, "allreduce, allgather(v) in place (default: out of place)");
  cli.integer("--warmup,-w", a.warmup, 0, 1 << 24, "N",
              "warmup calls (default: 1 + about 20 ms worth, at least 8, at most 50)");
  cli.integer("--iters,-n", a.iters, 1, 1 << 30, "N",
              "timed calls (default: enough for --min-time, 5..10000)");
  cli.custom("--min-time", "T", "time spent per size when -n is unset (default 0.3s)",
             [&a](const std::string& text, const std::string& what) {
               a.minTime =
                   std::chrono::duration<double>(collx::parseDurationNs(text, what)).count();
             });
  cli.flag("--no-check", a.noCheck, "skip the checked call");
  cli.text("--csv", a.csv, "FILE", "also write the results as CSV");
  cli.text("--json", a.json, "FILE", "also write the results as JSON");
  cli.flag("--stats", a.stats,
           "after the sweep, print rank 0's counters (Context::stats): calls per collective "
           "and algorithm (collx-bench's own small agreement calls between sizes included), "
           "failed calls, messages and bytes per transport and peer, time spent waiting");
  cli.parse(argc, argv);

  static const std::set<std::string> kCollectives = {
      "allreduce", "allgather", "allgatherv", "broadcast", "barrier",  "reduce_scatter", "reduce",
      "gather",    "gatherv",   "scatter",    "scatterv",  "alltoall", "alltoallv"};
  if (kCollectives.count(a.collective) == 0) {
    cli.fail("unknown collective '" + a.collective +
             "' (allreduce, allgather, allgatherv, broadcast, barrier, reduce_scatter, "
             "reduce, gather, gatherv, scatter, scatterv, alltoall, alltoallv)");
  }
  a.sizes = a.sweep.resolve(cli);
  if (a.collective == "barrier") a.sizes = {0};
  return a;
}

collx::algorithms::Collective collectiveOf(const std::string& name) {
  using collx::algorithms::Collective;
  if (name == "allgather") return Collective::kAllgather;
  if (name == "allgatherv") return Collective::kAllgatherv;
  if (name == "broadcast") return Collective::kBroadcast;
  if (name == "barrier") return Collective::kBarrier;
  if (name == "reduce_scatter") return Collective::kReduceScatter;
  if (name == "reduce") return Collective::kReduce;
  if (name == "gather") return Collective::kGather;
  if (name == "gatherv") return Collective::kGatherv;
  if (name == "scatterv") return Collective::kScatterv;
  if (name == "alltoallv") return Collective::kAlltoallv;
  if (name == "scatter") return Collective::kScatter;
  if (name == "alltoall") return Collective::kAlltoall;
  return Collective::kAllreduce;
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  std::size_t index = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size())));
  index = std::min(v.size() - 1, index == 0 ? 0 : index - 1);
  return v[index];
}

// Integer-valued inputs keep every reduction exact: the check is bit for bit.
double valueOf(int rank, std::uint64_t i) { return static_cast<double>((rank + i) % 5); }

void storeValue(void* data, std::uint64_t i, DataType t, double v) {
  auto* p = static_cast<std::uint8_t*>(data);
  switch (t) {
    case DataType::kInt8:
      reinterpret_cast<std::int8_t*>(p)[i] = static_cast<std::int8_t>(v);
      break;
    case DataType::kUint8:
      p[i] = static_cast<std::uint8_t>(v);
      break;
    case DataType::kInt32:
      reinterpret_cast<std::int32_t*>(p)[i] = static_cast<std::int32_t>(v);
      break;
    case DataType::kInt64:
      reinterpret_cast<std::int64_t*>(p)[i] = static_cast<std::int64_t>(v);
      break;
    case DataType::kFloat32:
      reinterpret_cast<float*>(p)[i] = static_cast<float>(v);
      break;
    case DataType::kFloat64:
      reinterpret_cast<double*>(p)[i] = v;
      break;
    case DataType::kFloat16: {
      _Float16 h = static_cast<_Float16>(v);
      std::memcpy(p + 2 * i, &h, 2);
      break;
    }
    case DataType::kBfloat16: {
      float f = static_cast<float>(v);
      std::uint32_t u;
      std::memcpy(&u, &f, 4);
      u += 0x7FFF + ((u >> 16) & 1);  // round to nearest even
      std::uint16_t b = static_cast<std::uint16_t>(u >> 16);
      std::memcpy(p + 2 * i, &b, 2);
      break;
    }
  }
}

struct Result {
  std::uint64_t bytes;
  std::uint64_t count;
  double timeUs;
  double p50Us;
  double p99Us;
  double algbw;
  double busbw;
  std::uint64_t wrong;
  std::string algorithm;
};

// The v-collectives run equal blocks in rank order: their buffers, checks and sizes are
// those of the collective without the v.
std::string layoutOf(const std::string& c) {
  if (c == "allgatherv" || c == "gatherv" || c == "scatterv" || c == "alltoallv")
    return c.substr(0, c.size() - 1);
  return c;
}

// The collectives whose buffers hold P blocks of `count` elements (the size counts them all).
bool blockwise(const std::string& c) {
  const std::string l = layoutOf(c);
  return l == "allgather" || l == "reduce_scatter" || l == "gather" || l == "scatter" ||
         l == "alltoall";
}

class Bench {
 public:
  Bench(collx::Context& ctx, const Args& args) : ctx_(ctx), a_(args), P_(ctx.size()) {
    // What every timed call needs, worked out once (a call of a few hundred nanoseconds
    // should not pay for string compares and option copies in the harness).
    coll_ = collectiveOf(a_.collective);
    base_.algorithm = a_.algorithm;
    reducing_.algorithm = a_.algorithm;
    reducing_.op = a_.op;
    std::set<std::string> hosts;
    for (const auto& peer : ctx.peers()) hosts.insert(collx::hostIdentity(peer));
    hosts_ = static_cast<int>(hosts.size());
    policy_ = collx::algorithms::SelectionPolicy::fromConfig(collx::Config::process(),
                                                             ctx.sharedMemory(), hosts_);
  }

  // The bytes of the input and the output of one rank for a call with `count`.
  std::uint64_t inputBytes(std::uint64_t count) const {
    const std::uint64_t b = count * collx::dataTypeSize(a_.dtype);
    const std::string c = layoutOf(a_.collective);
    return c == "reduce_scatter" || c == "scatter" || c == "alltoall" ? b * P_ : b;
  }
  std::uint64_t outputBytes(std::uint64_t count) const {
    const std::uint64_t b = count * collx::dataTypeSize(a_.dtype);
    const std::string c = layoutOf(a_.collective);
    return c == "allgather" || c == "gather" || c == "alltoall" ? b * P_ : b;
  }

  // Runs one call of the collective on `count` elements (per rank block for the blockwise ones).
  void call(std::uint64_t count, Buffer& in, Buffer& out) {
    if (equal_.empty() || equal_[0] != count) {  // the v-collectives' equal blocks
      equal_.assign(static_cast<std::size_t>(P_), count);
      displs_.resize(static_cast<std::size_t>(P_));
      for (int q = 0; q < P_; ++q) displs_[q] = static_cast<std::uint64_t>(q) * count;
    }
    const collx::CollectiveOptions& base = base_;
    const collx::ReduceOptions& reducing = reducing_;
    using collx::algorithms::Collective;
    switch (coll_) {
      case Collective::kAllreduce: {
        void* dst = a_.inPlace ? in.data() : out.data();
        return collx::allreduce(ctx_, in.data(), dst, count, a_.dtype, reducing);
      }
      case Collective::kAllgather:
        return collx::allgather(ctx_, a_.inPlace ? nullptr : in.data(), out.data(), count, a_.dtype,
                                base);
      case Collective::kAllgatherv:
        return collx::allgatherv(ctx_, a_.inPlace ? nullptr : in.data(), count, out.data(), equal_,
                                 displs_, a_.dtype, base);
      case Collective::kGatherv:
        return collx::gatherv(ctx_, in.data(), count, out.data(), equal_, displs_, a_.dtype,
                              a_.root, base);
      case Collective::kScatterv:
        return collx::scatterv(ctx_, in.data(), equal_, displs_, out.data(), count, a_.dtype,
                               a_.root, base);
      case Collective::kAlltoallv:
        return collx::alltoallv(ctx_, in.data(), equal_, displs_, out.data(), equal_, displs_,
                                a_.dtype, base);
      case Collective::kBroadcast:
        return collx::broadcast(ctx_, in.data(), count, a_.dtype, a_.root, base);
      case Collective::kReduceScatter:
        return collx::reduceScatter(ctx_, in.data(), out.data(), count, a_.dtype, reducing);
      case Collective::kReduce:
        return collx::reduce(ctx_, in.data(), out.data(), count, a_.dtype, a_.root, reducing);
      case Collective::kGather:
        return collx::gather(ctx_, in.data(), out.data(), count, a_.dtype, a_.root, base);
      case Collective::kScatter:
        return collx::scatter(ctx_, in.data(), out.data(), count, a_.dtype, a_.root, base);
      case Collective::kAlltoall:
        return collx::alltoall(ctx_, in.data(), out.data(), count, a_.dtype, base);
      default:
        return collx::barrier(ctx_, base);
    }
  }

  // The reduction of element i over every rank's valueOf(rank, i), in the type's semantics.
  double reduced(std::uint64_t i) const {
    double acc = valueOf(0, i);
    for (int q = 1; q < P_; ++q) {
      double v = valueOf(q, i);
      switch (a_.op) {
        case collx::ReduceOpKind::kProd:
          acc *= v;
          break;
        case collx::ReduceOpKind::kMin:
          acc = std::min(acc, v);
          break;
        case collx::ReduceOpKind::kMax:
          acc = std::max(acc, v);
          break;
        case collx::ReduceOpKind::kBand:
          acc = static_cast<double>(static_cast<long>(acc) & static_cast<long>(v));
          break;
        case collx::ReduceOpKind::kBor:
          acc = static_cast<double>(static_cast<long>(acc) | static_cast<long>(v));
          break;
        case collx::ReduceOpKind::kBxor:
          acc = static_cast<double>(static_cast<long>(acc) ^ static_cast<long>(v));
          break;
        default:
          acc += v;
      }
    }
    if (a_.op == collx::ReduceOpKind::kAvg) {
      if (collx::isInteger(a_.dtype)) {
        acc = std::trunc(acc / P_);
      } else if (a_.dtype == DataType::kFloat64) {
        acc = acc / P_;
      } else {  // one float32 division, then the type's rounding
        acc = static_cast<double>(static_cast<float>(acc) / static_cast<float>(P_));
      }
    }
    return acc;
  }

  // alltoall: element i of the block rank `from` sends rank `to`.
  static double blockValue(int from, int to, std::uint64_t i) {
    return valueOf(from * 3 + to * 7, i);
  }

  // Elements that differ from the reference after one call on this rank.
  std::uint64_t check(std::uint64_t count) {
    const std::size_t es = collx::dataTypeSize(a_.dtype);
    const int r = ctx_.rank();
    const std::string c = layoutOf(a_.collective);
    if (c == "barrier") {
      Buffer none;
      call(0, none, none);
      return 0;
    }
    const bool isRoot = r == a_.root;
    Buffer in(inputBytes(count)), out(outputBytes(count), 0), expected;
    const std::uint64_t inElems = in.size() / es;
    for (std::uint64_t i = 0; i < inElems; ++i) storeValue(in.data(), i, a_.dtype, valueOf(r, i));
    if (c == "scatter") {  // block q of the root's buffer is rank q's valueOf
      for (std::uint64_t i = 0; i < inElems; ++i) {
        storeValue(in.data(), i, a_.dtype, valueOf(static_cast<int>(i / count), i % count));
      }
    } else if (c == "alltoall") {
      for (std::uint64_t i = 0; i < inElems; ++i) {
        storeValue(in.data(), i, a_.dtype, blockValue(r, static_cast<int>(i / count), i % count));
      }
    }
    bool checked = true;  // false: this rank has no result to compare
    expected.resize(out.size());
    const std::uint64_t outElems = out.size() / es;
    for (std::uint64_t i = 0; i < outElems; ++i) {
      double want = 0;
      if (c == "allreduce" || c == "reduce") {
        want = reduced(i);
      } else if (c == "reduce_scatter") {
        want = reduced(static_cast<std::uint64_t>(r) * count + i);
      } else if (c == "allgather" || c == "gather") {
        want = valueOf(static_cast<int>(i / count), i % count);
      } else if (c == "broadcast") {
        want = valueOf(a_.root, i);
      } else if (c == "scatter") {
        want = valueOf(r, i);
      } else if (c == "alltoall") {
        want = blockValue(static_cast<int>(i / count), r, i % count);
      }
      storeValue(expected.data(), i, a_.dtype, want);
    }
    if (c == "reduce" || c == "gather") checked = isRoot;
    const bool reduces = c == "allreduce" || c == "reduce" || c == "reduce_scatter";
    if (reduces && a_.op == collx::ReduceOpKind::kProd && P_ > 8) {
      checked = false;  // products overflow the small types
    }
    if (c == "allgather" && a_.inPlace)
      std::memcpy(out.data() + r * count * es, in.data(), count * es);
    call(count, in, out);
    if (c == "broadcast" || (c == "allreduce" && a_.inPlace)) out = in;
    if (!checked) return 0;
    std::uint64_t wrong = 0;
    for (std::uint64_t i = 0; i < expected.size() / es; ++i) {
      if (std::memcmp(out.data() + i * es, expected.data() + i * es, es) != 0) ++wrong;
    }
    return wrong;
  }

  Result measure(std::uint64_t bytes) {
    const std::size_t es = collx::dataTypeSize(a_.dtype);
    const std::string& c = a_.collective;
    const bool blocks = blockwise(c);
    const std::uint64_t count = bytes / es / (blocks ? static_cast<std::uint64_t>(P_) : 1);
    Result res{};
    res.bytes = count * es * (blocks ? P_ : 1);
    res.count = count * (blocks ? P_ : 1);
    if (c == "barrier") res.bytes = res.count = 0;
    res.algorithm = algorithmFor(count);

    // The checked call; #wrong is the total over ranks.
    std::uint64_t wrong = a_.noCheck ? 0 : check(count);
    std::uint64_t totalWrong = wrong;
    collx::AllreduceOptions sum;
    collx::allreduce(ctx_, &wrong, &totalWrong, 1, DataType::kInt64, sum);
    res.wrong = totalWrong;

    Buffer in(std::max<std::uint64_t>(inputBytes(count), 1), 0);
    Buffer out(std::max<std::uint64_t>(outputBytes(count), 1), 0);
    // Back-to-back rooted calls pipeline (a non-root may leave before the root is done).
    const std::string l = layoutOf(c);
    const bool fence = l == "broadcast" || l == "reduce" || l == "gather" || l == "scatter";
    // Warmup: one call, then about 20 ms worth, at least 8 calls (the shm collectives that may
    // read directly try both ways in their first 6 calls of a size: COLLX_SHM_DIRECT=auto),
    // at most 50.
    auto t0 = Clock::now();
    call(count, in, out);
    double first = seconds(Clock::now() - t0);
    // Every rank must make the same number of calls: agree on the slowest first call.
    collx::AllreduceOptions slowestFirst;
    slowestFirst.op = collx::ReduceOpKind::kMax;
    collx::allreduce(ctx_, &first, &first, 1, DataType::kFloat64, slowestFirst);
    int warmup = a_.warmup >= 0
                     ? a_.warmup
                     : static_cast<int>(std::clamp(0.02 / std::max(first, 1e-7), 8.0, 50.0));
    for (int i = 0; i < warmup; ++i) {
      if (fence) collx::barrier(ctx_);
      call(count, in, out);
    }
    // Iterations: rank 0's estimate, agreed by everyone.
    double estimate = first;
    if (warmup > 0) {
      t0 = Clock::now();
      call(count, in, out);
      estimate = seconds(Clock::now() - t0);
    }
    std::int64_t iters = a_.iters > 0 ? a_.iters
                                      : static_cast<std::int64_t>(std::clamp(
                                            a_.minTime / std::max(estimate, 1e-7), 5.0, 10000.0));
    collx::broadcast(ctx_, &iters, 1, DataType::kInt64, 0);
    std::vector<double> samples(static_cast<std::size_t>(iters));
    for (auto& sample : samples) {
      if (fence) collx::barrier(ctx_);
      t0 = Clock::now();
      call(count, in, out);
      sample = seconds(Clock::now() - t0) * 1e6;
    }
    // Per iteration, the slowest rank; per rank, the median.
    std::vector<double> slowest = samples;
    collx::AllreduceOptions max;
    max.op = collx::ReduceOpKind::kMax;
    collx::allreduce(ctx_, slowest.data(), slowest.data(), slowest.size(), DataType::kFloat64, max);
    double median = percentile(samples, 0.5);
    collx::allreduce(ctx_, &median, &median, 1, DataType::kFloat64, max);
    res.timeUs = median;
    res.p50Us = percentile(slowest, 0.5);
    res.p99Us = percentile(slowest, 0.99);
    double sec = res.timeUs / 1e6;
    res.algbw = sec > 0 ? static_cast<double>(res.bytes) / sec / 1e9 : 0;
    double factor = 1;
    if (c == "allreduce")
      factor = 2.0 * (P_ - 1) / P_;
    else if (blocks)
      factor = static_cast<double>(P_ - 1) / P_;
    else if (c == "barrier")
      factor = 0;
    res.busbw = res.algbw * factor;
    return res;
  }

  // The algorithm a call of `count` runs: what the library chooses for it
  // (algorithms::select, with the settings a context reads), the named one if any.
  std::string algorithmFor(std::uint64_t count) const {
    collx::algorithms::UniformCall call;
    call.coll = coll_;
    call.ranks = P_;
    call.count = coll_ == collx::algorithms::Collective::kBarrier ? 0 : count;
    call.dtype = a_.dtype;
    call.op = a_.op;
    call.root = a_.root;
    call.inPlace = a_.inPlace;
    return collx::algorithms::select(collx::algorithms::paramsOf(call, ctx_.rank()), policy_,
                                     a_.algorithm)
        .algorithm->name;
  }

 private:
  static double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
  collx::Context& ctx_;
  const Args& a_;
  int P_;
  int hosts_ = 1;
  collx::algorithms::SelectionPolicy policy_;
  collx::algorithms::Collective coll_;  // a_.collective
  collx::CollectiveOptions base_;
  collx::ReduceOptions reducing_;
  collx::Counts equal_, displs_;
};

}  // namespace

int main(int argc, char** argv) {
  collx::cli::CommandLine cli("collx-bench", "collx-bench [options]     (run it under collx-run)",
                              kAbout, kFooter);
  Args args = parseArgs(argc, argv, cli);
  if (args.algorithm == "list") {
    std::fputs(args.markdown ? collx::algorithms::algorithmTablesMarkdown().c_str()
                             : collx::algorithms::algorithmList().c_str(),
               stdout);
    return 0;
  }
  try {
    auto ctx = collx::init();
    const int P = ctx->size();
    if (args.root >= P) cli.fail("--root is outside [0, " + std::to_string(P) + ")");
    Bench bench(*ctx, args);
    std::set<std::string> hosts;
    for (const auto& peer : ctx->peers()) hosts.insert(collx::hostIdentity(peer));
    std::string transports;
    auto names = ctx->transports();
    for (std::size_t r = 0; r < names.size(); ++r) {
      transports += (r ? " " : "") + std::to_string(r) + ":" + names[r];
    }
    std::string algorithm =
        args.algorithm.empty() ? "default (per size, see the algo column)" : args.algorithm;
    const bool root = ctx->rank() == 0;
    if (root) {
      std::printf("# collx-bench %s: %s %s op %s, P=%d on %zu host(s), algorithm %s\n",
                  collx::versionString(), args.collective.c_str(), collx::dataTypeName(args.dtype),
                  collx::reduceOpKindName(args.op), P, hosts.size(), algorithm.c_str());
      std::printf("# transports seen from rank 0: %s\n", transports.c_str());
      std::printf("# %12s %12s %8s %11s %11s %11s %11s %11s %7s  %s\n", "size(B)", "count", "type",
                  "time(us)", "p50(us)", "p99(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong", "algo");
      std::fflush(stdout);
    }
    std::vector<Result> results;
    for (std::uint64_t bytes : args.sizes) {
      Result r = bench.measure(bytes);
      results.push_back(r);
      if (root) {
        std::printf("  %12llu %12llu %8s %11.2f %11.2f %11.2f %11.4f %11.4f %7llu  %s\n",
                    static_cast<unsigned long long>(r.bytes),
                    static_cast<unsigned long long>(r.count), collx::dataTypeName(args.dtype),
                    r.timeUs, r.p50Us, r.p99Us, r.algbw, r.busbw,
                    static_cast<unsigned long long>(r.wrong), r.algorithm.c_str());
        std::fflush(stdout);
      }
    }
    if (root && args.stats) {
      // (Read before anything else is called: the counters of the sweep alone.)
      std::istringstream lines(ctx->stats().describe());
      std::printf("# stats of rank 0 (Context::stats):\n");
      for (std::string line; std::getline(lines, line);) std::printf("#   %s\n", line.c_str());
      std::fflush(stdout);
    }
    std::uint64_t anyWrong = 0;
    for (const Result& r : results) anyWrong += r.wrong;
    if (root && !args.csv.empty()) {
      std::ofstream csv(args.csv);
      csv << "# collective=" << args.collective << " P=" << P << " hosts=" << hosts.size()
          << " algorithm=" << algorithm << " transports=" << transports << "\n";
      csv << "size,count,dtype,time_us,p50_us,p99_us,algbw_gbps,busbw_gbps,wrong,algorithm\n";
      for (const Result& r : results) {
        csv << r.bytes << "," << r.count << "," << collx::dataTypeName(args.dtype) << ","
            << r.timeUs << "," << r.p50Us << "," << r.p99Us << "," << r.algbw << "," << r.busbw
            << "," << r.wrong << "," << r.algorithm << "\n";
      }
    }
    if (root && !args.json.empty()) {
      // Keys in the order the CSV has its columns.
      nlohmann::ordered_json rows = nlohmann::ordered_json::array();
      for (const Result& r : results) {
        rows.push_back({{"size", r.bytes},
                        {"count", r.count},
                        {"dtype", collx::dataTypeName(args.dtype)},
                        {"time_us", r.timeUs},
                        {"p50_us", r.p50Us},
                        {"p99_us", r.p99Us},
                        {"algbw_gbps", r.algbw},
                        {"busbw_gbps", r.busbw},
                        {"wrong", r.wrong},
                        {"algorithm", r.algorithm}});
      }
      const nlohmann::ordered_json doc = {{"collective", args.collective},
                                          {"P", P},
                                          {"hosts", hosts.size()},
                                          {"dtype", collx::dataTypeName(args.dtype)},
                                          {"op", collx::reduceOpKindName(args.op)},
                                          {"algorithm", algorithm},
                                          {"transports", transports},
                                          {"results", rows}};
      std::ofstream json(args.json);
      json << doc.dump(2) << "\n";
    }
    return anyWrong == 0 ? 0 : 3;
  } catch (const collx::Error& e) {
    std::fprintf(stderr, "collx-bench: %s: %s\n", collx::errorKindName(e.kind()), e.what());
    return 1;
  }
}
