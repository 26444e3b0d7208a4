// collx-bench: sweeps message sizes for one collective and algorithm, under collx-run.
//
//   collx-run -n 4 collx-bench -c allreduce -a ring -b 4 -e 64M -f 4 -d float32 -o sum
//
// Per size: one checked call (#wrong counts the elements that differ from the reference on
// any rank), warmup, then iterations timed one by one (their number scaled to the size and
// agreed by all ranks). time = max over ranks of each rank's median (--time-stat middle: of
// the mean of its calls between the 25th and 75th percentile, as deaf to outliers as the
// median and finer than the clock's tick, 10 ns on some VMs, which a median of short calls
// snaps to); p50 and p99 are taken over the iterations, each iteration's time being the
// slowest rank's. Columns
// follow nccl-tests: algbw = bytes / time, busbw = algbw * (2(P-1)/P allreduce, (P-1)/P
// allgather(v), reduce_scatter, gather, scatter and alltoall, 1 broadcast and reduce), GB/s
// = 1e9 B/s. Sizes: allreduce, broadcast and reduce count the vector, the others the whole
// buffer of P blocks (allgather's and gather's result, reduce_scatter's input, scatter's
// input at the root, alltoall's send buffer). The v-collectives run equal blocks in rank
// order, to be compared with the collectives without the v.
//
// -a all runs every algorithm of the collective that can take the calls in this job
// (algorithms::eligibleAlgorithms), one after the other over the same sizes. --plot draws
// the results with benchmarks/plot/collx_plot.py (matplotlib), which CMake copies beside
// the tools (share/collx/ from bin/, in the build tree and in an install).
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <new>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
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
// The bytes a Buffer of `bytes` takes: whole pages.
constexpr std::uint64_t pageRound(std::uint64_t bytes) { return (bytes + 4095) / 4096 * 4096; }

using Clock = std::chrono::steady_clock;
using collx::DataType;

constexpr const char* kAbout =
    R"(Sweeps message sizes for one collective and prints, per size: size, count, type, time (us,
max over ranks of the median; --time-stat), p50 and p99 (us), algbw and busbw (GB/s) and
#wrong (elements that differed from the reference on any rank; must be 0). With -a all,
every algorithm of the collective that can run in this job, one after the other over the
same sizes (the algo column, and the CSV's and JSON's algorithm, say which). --plot draws
busbw and time against size, log-log, one line per algorithm. On a terminal, rank 0 shows
its progress on stderr (one line, rewritten); elsewhere (a pipe, a file, CI) nothing.
)";

constexpr const char* kFooter =
    R"(exit codes: 0 every result right; 3 some #wrong; 1 a collx error; 2 bad arguments;
4 --plot could not draw (its Python, matplotlib or collx_plot.py missing, or the script
failed: checked before the sweep, and after it).
)";

// How collx-bench --plot draws: this Python (CMake's Python3_EXECUTABLE) runs the script,
// found from the directory of the running collx-bench.
#ifndef COLLX_PLOT_PYTHON
#define COLLX_PLOT_PYTHON "python3"
#endif
#ifndef COLLX_PLOT_SCRIPT_REL
#define COLLX_PLOT_SCRIPT_REL "../share/collx/collx_plot.py"
#endif
constexpr int kPlotFailed = 4;  // the exit code
// How long the plotting script may take (then it is killed). Its --check before the sweep is
// also bounded by half the context's timeout: the other ranks wait for its answer in a
// broadcast that fails at that timeout.
constexpr std::chrono::milliseconds kPlotLimit = std::chrono::seconds(300);

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
  bool interleave = false;
  bool stamp = false;
  std::string csv;
  std::string json;
  std::string plot;  // a .png or .svg to draw
  std::string plotPython = COLLX_PLOT_PYTHON;
  bool stats = false;
  bool middleMean = false;   // --time-stat middle
  std::uint64_t rotate = 0;  // --rotate: bytes of buffers per rank to cycle through (0: one set)
};

std::string lowerExtension(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ext;
}

Args parseArgs(int argc, char** argv, collx::cli::CommandLine& cli) {
  Args a;
  cli.text("-c,--collective", a.collective, "NAME",
           "allreduce (default), allgather, broadcast, barrier, reduce_scatter, reduce, gather, "
           "scatter, alltoall, and allgatherv, gatherv, scatterv, alltoallv (equal blocks)");
  cli.text("-a,--algorithm", a.algorithm, "NAME",
           "an algorithm of that collective (default: chosen per size); \"all\": every one "
           "that can run in this job, one after the other; \"list\" prints them");
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
  cli.custom("--time-stat", "STAT",
             "a rank's typical call: median (default, as the peers' benchmarks take it) or "
             "middle (the mean of its middle half of calls, 25th to 75th percentile: finer "
             "than the clock's tick, 10 ns on some VMs, to tell small differences apart)",
             [&a](const std::string& text, const std::string& what) {
               if (text != "median" && text != "middle") {
                 throw collx::InvalidArgument(collx::Where{-1, "collx-bench", -1},
                                              what + ": '" + text + "': median or middle");
               }
               a.middleMean = text == "middle";
             });
  cli.flag("--no-check", a.noCheck, "skip the checked call");
  cli.bytes("--rotate", a.rotate, "SIZE",
            "cycle through sets of buffers that take SIZE bytes per rank together (e.g. 256M, "
            "several times the last-level cache), a different set on every call, so that no "
            "call finds its vectors in a cache that a call before it warmed (as XHC's authors "
            "measure); default 0: every call uses the same buffers");
  cli.flag("--interleave", a.interleave,
           "with -a all: size after size, every algorithm at one size before the next size, "
           "their order rotated from size to size, so that noise drifting with time falls on "
           "every algorithm alike (collx-tune runs this way); rows in the order they ran");
  cli.flag("--stamp", a.stamp,
           "right after joining, one 4-byte allreduce; rank 0 prints the wall-clock time it "
           "returned at (\"# first collective returned at <unix seconds>\"), to measure a "
           "launch's time to the first collective (benchmarks/compare/cluster_start.sh)");
  cli.text("--csv", a.csv, "FILE", "also write the results as CSV");
  cli.text("--json", a.json, "FILE",
           "also write the results as JSON; - (or this process's stdout, as /dev/stdout): "
           "the JSON alone on stdout and the table on stderr");
  cli.text("--plot", a.plot, "FILE",
           "after the sweep, draw busbw (GB/s) and time (us) against size (B), log-log, one "
           "line per algorithm, into FILE: .png or .svg (by its extension); needs Python with "
           "matplotlib (Debian: python3-matplotlib)");
  cli.text("--plot-python", a.plotPython, "PATH",
           "the Python that runs --plot's script (default " COLLX_PLOT_PYTHON ")");
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
  if (!a.plot.empty()) {
    const std::string ext = lowerExtension(a.plot);
    if (ext != ".png" && ext != ".svg") {
      cli.fail("--plot='" + a.plot + "': the picture's format follows its extension, .png or .svg");
    }
    if (a.collective == "barrier") cli.fail("--plot draws against size, and a barrier has none");
    const std::filesystem::path dir = std::filesystem::path(a.plot).parent_path();
    std::error_code ec;
    if (!dir.empty() && !std::filesystem::is_directory(dir, ec)) {
      cli.fail("--plot='" + a.plot + "': no directory " + dir.string());
    }
  }
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

// The mean of the middle half of `v` (from the 25th to the 75th percentile).
double middleMean(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t from = v.size() / 4;
  const std::size_t to = std::max(v.size() - v.size() / 4, from + 1);
  double sum = 0;
  for (std::size_t i = from; i < to; ++i) sum += v[i];
  return sum / static_cast<double>(to - from);
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
  std::uint64_t bufferSets;  // 1, or with --rotate the sets the calls cycled through
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
    reducing_.op = a_.op;
    std::set<std::string> hosts;
    for (const auto& peer : ctx.peers()) hosts.insert(collx::hostIdentity(peer));
    hosts_ = static_cast<int>(hosts.size());
    policy_ = collx::algorithms::SelectionPolicy::fromConfig(collx::Config::process(),
                                                             ctx.sharedMemory(), hosts_);
  }

  // The algorithm the next calls name ("": the library chooses per call).
  void setAlgorithm(const std::string& name) {
    algorithm_ = name;
    base_.algorithm = name;
    reducing_.algorithm = name;
  }

  // Every algorithm of the collective that can take its calls in this job (-a all): the same
  // on every rank.
  std::vector<std::string> eligible() const {
    std::vector<std::string> names;
    for (const auto* info : collx::algorithms::eligibleAlgorithms(
             collx::algorithms::paramsOf(uniformCall(1), ctx_.rank()), policy_)) {
      names.emplace_back(info->name);
    }
    return names;
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

    // One set of buffers, or with --rotate enough sets to fill its bytes (page-aligned each).
    const std::uint64_t inBytes = std::max<std::uint64_t>(inputBytes(count), 1);
    const std::uint64_t outBytes = std::max<std::uint64_t>(outputBytes(count), 1);
    const std::uint64_t setBytes = pageRound(inBytes) + pageRound(outBytes);
    const std::uint64_t sets = std::max<std::uint64_t>(1, (a_.rotate + setBytes - 1) / setBytes);
    std::vector<Buffer> ins, outs;
    ins.reserve(sets);
    outs.reserve(sets);
    for (std::uint64_t k = 0; k < sets; ++k) {
      ins.emplace_back(inBytes, 0);
      outs.emplace_back(outBytes, 0);
    }
    res.bufferSets = sets;
    std::uint64_t next = 0;
    // One call on the next set's buffers, round the sets.
    auto callNext = [&] {
      const std::uint64_t k = next++ % sets;
      call(count, ins[k], outs[k]);
    };
    // Back-to-back rooted calls pipeline (a non-root may leave before the root is done).
    const std::string l = layoutOf(c);
    const bool fence = l == "broadcast" || l == "reduce" || l == "gather" || l == "scatter";
    // Warmup: one call, then about 20 ms worth, at least 8 calls (the shm collectives that may
    // read directly try both ways in their first 6 calls of a size: COLLX_SHM_DIRECT=auto),
    // at most 50.
    auto t0 = Clock::now();
    callNext();
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
      callNext();
    }
    // Iterations: rank 0's estimate, agreed by everyone.
    double estimate = first;
    if (warmup > 0) {
      t0 = Clock::now();
      callNext();
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
      callNext();
      sample = seconds(Clock::now() - t0) * 1e6;
    }
    // Per iteration, the slowest rank; per rank, its typical call.
    std::vector<double> slowest = samples;
    collx::AllreduceOptions max;
    max.op = collx::ReduceOpKind::kMax;
    collx::allreduce(ctx_, slowest.data(), slowest.data(), slowest.size(), DataType::kFloat64, max);
    double typical = a_.middleMean ? middleMean(samples) : percentile(samples, 0.5);
    collx::allreduce(ctx_, &typical, &typical, 1, DataType::kFloat64, max);
    res.timeUs = typical;
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
    return collx::algorithms::select(collx::algorithms::paramsOf(uniformCall(count), ctx_.rank()),
                                     policy_, algorithm_)
        .algorithm->name;
  }

 private:
  collx::algorithms::UniformCall uniformCall(std::uint64_t count) const {
    collx::algorithms::UniformCall call;
    call.coll = coll_;
    call.ranks = P_;
    call.count = coll_ == collx::algorithms::Collective::kBarrier ? 0 : count;
    call.dtype = a_.dtype;
    call.op = a_.op;
    call.root = a_.root;
    call.inPlace = a_.inPlace;
    return call;
  }

  static double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
  collx::Context& ctx_;
  const Args& a_;
  int P_;
  int hosts_ = 1;
  collx::algorithms::SelectionPolicy policy_;
  collx::algorithms::Collective coll_;  // a_.collective
  std::string algorithm_;               // the one the calls name, "" for none
  collx::CollectiveOptions base_;
  collx::ReduceOptions reducing_;
  collx::Counts equal_, displs_;
};

// One line on stderr, rewritten in place while a sweep runs: where it is, how long it has
// taken and about how long the rest will (the mean step so far times the steps left). Only
// where stderr is a terminal: in a pipe, a file or a CI log it prints nothing.
class Progress {
 public:
  Progress(bool enabled, std::size_t sizes, std::size_t algorithms)
      : enabled_(enabled && ::isatty(STDERR_FILENO) == 1),
        sizes_(sizes),
        algorithms_(algorithms),
        start_(Clock::now()) {}
  ~Progress() { clear(); }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // Before the step of size `size` and algorithm `algorithm` (both from 0).
  void show(std::size_t size, std::size_t algorithm, const std::string& name) {
    if (!enabled_) return;
    const std::size_t done = algorithm * sizes_ + size;
    const std::size_t total = algorithms_ * sizes_;
    const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
    std::string line =
        "collx-bench: size " + std::to_string(size + 1) + " of " + std::to_string(sizes_);
    if (algorithms_ > 1) {
      line += " (algorithm " + std::to_string(algorithm + 1) + " of " +
              std::to_string(algorithms_) + ": " + name + ")";
    }
    line += ", elapsed " + human(elapsed) + ", remaining ";
    line +=
        done == 0
            ? "?"
            : "~" + human(elapsed / static_cast<double>(done) * static_cast<double>(total - done));
    std::fprintf(stderr, "\r%s\033[K", line.c_str());  // \033[K: erase what a longer line left
    std::fflush(stderr);
    shown_ = true;
  }

  // Erases the line: before a table row goes to the same terminal, and at the end.
  void clear() {
    if (!shown_) return;
    std::fputs("\r\033[K", stderr);
    std::fflush(stderr);
    shown_ = false;
  }

 private:
  static std::string human(double seconds) {
    char text[32];
    const long s = std::lround(seconds);
    if (seconds < 60) {
      std::snprintf(text, sizeof(text), "%.1fs", seconds);
    } else if (s < 3600) {
      std::snprintf(text, sizeof(text), "%ldm%02lds", s / 60, s % 60);
    } else {
      std::snprintf(text, sizeof(text), "%ldh%02ldm", s / 3600, s / 60 % 60);
    }
    return text;
  }

  bool enabled_;
  bool shown_ = false;
  std::size_t sizes_;
  std::size_t algorithms_;
  Clock::time_point start_;
};

// The results as --json writes them (keys in the order the CSV has its columns).
nlohmann::ordered_json resultsJson(const Args& args, int P, std::size_t hosts,
                                   const std::string& algorithm, const std::string& transports,
                                   const std::vector<Result>& results) {
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
                    {"algorithm", r.algorithm},
                    {"buffer_sets", r.bufferSets}});
  }
  return {{"collective", args.collective},
          {"P", P},
          {"hosts", hosts},
          {"dtype", collx::dataTypeName(args.dtype)},
          {"op", collx::reduceOpKindName(args.op)},
          {"algorithm", algorithm},
          {"transports", transports},
          {"rotate_bytes", args.rotate},
          {"results", rows}};
}

// Whether --json names this process's stdout: "-", or a path to the same file or pipe
// (/dev/stdout, say). The JSON then goes there alone, the table to stderr.
bool jsonIsStdout(const std::string& path) {
  if (path == "-") return true;
  struct stat out {
  }, named{};
  return ::fstat(STDOUT_FILENO, &out) == 0 && ::stat(path.c_str(), &named) == 0 &&
         out.st_dev == named.st_dev && out.st_ino == named.st_ino;
}

// Writes `doc` to `path`; false when it cannot.
bool writeJson(const std::string& path, const nlohmann::ordered_json& doc) {
  std::ofstream json(path);
  json << doc.dump(2) << "\n";
  json.close();
  return static_cast<bool>(json);
}

// Writes `doc` to descriptor `fd` (the stdout that --json - kept) and closes it.
bool writeJson(int fd, const nlohmann::ordered_json& doc) {
  FILE* out = ::fdopen(fd, "w");
  if (out == nullptr) {
    ::close(fd);
    return false;
  }
  const bool wrote = std::fputs((doc.dump(2) + "\n").c_str(), out) >= 0;
  return std::fclose(out) == 0 && wrote;
}

// A file of its own under $TMPDIR (else /tmp), removed when this goes away.
class TempFile {
 public:
  explicit TempFile(const std::string& suffix) {
    const char* dir = std::getenv("TMPDIR");
    std::string pattern =
        std::string(dir != nullptr && *dir ? dir : "/tmp") + "/collx-bench-XXXXXX" + suffix;
    std::vector<char> name(pattern.begin(), pattern.end());
    name.push_back('\0');
    const int fd = ::mkstemps(name.data(), static_cast<int>(suffix.size()));
    if (fd < 0) {
      throw collx::IoError(collx::Where{}, "cannot create a temporary file " + pattern + ": " +
                                               std::strerror(errno));
    }
    ::close(fd);
    path_ = name.data();
  }
  ~TempFile() { ::unlink(path_.c_str()); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// runChild's results that are not an exit code (each comes with `why`).
constexpr int kNoExitCode = -1;     // killed, out of time, or lost (waitpid failed)
constexpr int kCouldNotStart = -2;  // posix_spawnp failed: no such program, or not executable

// Runs argv (argv[0] a path, or a name looked up in PATH) with this environment, and waits
// at most `limit` (then kills it): its exit code, or kCouldNotStart or kNoExitCode with `why`.
int runChild(const std::vector<std::string>& argv, std::chrono::milliseconds limit,
             std::string& why) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  if (const int err = ::posix_spawnp(&pid, args[0], nullptr, nullptr, args.data(), environ)) {
    why = "cannot run " + argv[0] + ": " + std::strerror(err);
    return kCouldNotStart;
  }
  const auto deadline = Clock::now() + limit;
  int status = 0;
  while (true) {
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) {
      why = std::string("waiting for ") + argv[0] + ": " + std::strerror(errno);
      return kNoExitCode;
    }
    if (Clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      why = argv[0] + " " + argv[1] + " did not finish within " + std::to_string(limit.count()) +
            " ms (killed)";
      return kNoExitCode;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  why = argv[0] + " " + argv[1] + " was killed by signal " + std::to_string(WTERMSIG(status));
  return kNoExitCode;
}

// Where collx_plot.py is: COLLX_PLOT_SCRIPT_REL from this program's directory (bin/ of the
// build tree or of an install).
std::string plotScript() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return (exe.parent_path() / COLLX_PLOT_SCRIPT_REL).lexically_normal().string();
}

// Runs the plotting script with `args` after it, for at most `limit`: "" when it drew (or,
// with --check, when it can), else what went wrong.
std::string runPlot(const Args& a, const std::vector<std::string>& args,
                    std::chrono::milliseconds limit) {
  const std::string script = plotScript();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(script, ec)) {
    return "the plotting script is not at " + script +
           " (collx-bench looks for it at " COLLX_PLOT_SCRIPT_REL " from its own directory)";
  }
  std::vector<std::string> argv = {a.plotPython, script};
  argv.insert(argv.end(), args.begin(), args.end());
  std::string why;
  const int code = runChild(argv, limit, why);
  if (code == 0) return "";
  if (code == kCouldNotStart) return why + " (--plot-python names another Python)";
  if (code < 0) return why;
  return a.plotPython + " " + script + " failed with exit code " + std::to_string(code) +
         (code == 3 ? " (matplotlib missing: apt-get install python3-matplotlib)" : "");
}

}  // namespace

int main(int argc, char** argv) {
  collx::cli::CommandLine cli("collx-bench", "collx-bench [options]     (run it under collx-run)",
                              kAbout, kFooter);
  Args args = parseArgs(argc, argv, cli);
  // --json -: the JSON alone on the stdout given, everything else printed on stderr.
  int jsonOut = -1;
  if (!args.json.empty() && jsonIsStdout(args.json)) {
    std::fflush(stdout);
    jsonOut = ::dup(STDOUT_FILENO);
    if (jsonOut < 0 || ::dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
      std::fprintf(stderr, "collx-bench: --json %s: %s\n", args.json.c_str(), std::strerror(errno));
      return 2;
    }
  }
  if (args.algorithm == "list") {
    std::fputs(args.markdown ? collx::algorithms::algorithmTablesMarkdown().c_str()
                             : collx::algorithms::algorithmList().c_str(),
               stdout);
    return 0;
  }
  try {
    auto ctx = collx::init();
    if (args.stamp) {
      std::int32_t one = 1;
      collx::allreduce(*ctx, &one, &one, 1, DataType::kInt32);
      const double now =
          std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
              .count();
      if (ctx->rank() == 0) std::printf("# first collective returned at %.6f\n", now);
    }
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
    const bool all = args.algorithm == "all";
    const std::vector<std::string> algorithms =
        all ? bench.eligible() : std::vector<std::string>{args.algorithm};
    std::string algorithm = args.algorithm;
    if (args.algorithm.empty()) algorithm = "default (per size, see the algo column)";
    const bool root = ctx->rank() == 0;
    // Whether --plot can draw, found out before the sweep (rank 0 asks, every rank stops).
    if (!args.plot.empty()) {
      std::int32_t ready = 1;
      if (root) {
        const std::string why =
            runPlot(args, {"--check"}, std::min(kPlotLimit, ctx->timeout() / 2));
        if (!why.empty()) {
          std::fprintf(stderr, "collx-bench: --plot: %s\n", why.c_str());
          ready = 0;
        }
      }
      collx::broadcast(*ctx, &ready, 1, DataType::kInt32, 0);
      if (ready == 0) return kPlotFailed;
    }
    if (root) {
      std::string shown = algorithm;
      if (all) {
        shown += ":";
        for (const std::string& name : algorithms) shown += " " + name;
      }
      std::printf("# collx-bench %s: %s %s op %s, P=%d on %zu host(s), algorithm %s\n",
                  collx::versionString(), args.collective.c_str(), collx::dataTypeName(args.dtype),
                  collx::reduceOpKindName(args.op), P, hosts.size(), shown.c_str());
      std::printf("# transports seen from rank 0: %s\n", transports.c_str());
      if (args.rotate > 0) {
        std::printf(
            "# buffers: every call takes the next of the sets that fill %llu bytes per "
            "rank (--rotate)\n",
            static_cast<unsigned long long>(args.rotate));
      }
      std::printf("# %12s %12s %8s %11s %11s %11s %11s %11s %7s  %s\n", "size(B)", "count", "type",
                  "time(us)", "p50(us)", "p99(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong", "algo");
      std::fflush(stdout);
    }
    std::vector<Result> results;
    Progress progress(root, args.sizes.size(), algorithms.size());
    // (a, k): algorithm after algorithm, or with --interleave size after size.
    std::vector<std::pair<std::size_t, std::size_t>> order;
    const std::size_t A = algorithms.size();
    for (std::size_t i = 0; i < A; ++i) {
      for (std::size_t j = 0; j < args.sizes.size(); ++j) order.emplace_back(i, j);
    }
    if (args.interleave) {
      std::sort(order.begin(), order.end(), [A](const auto& x, const auto& y) {
        if (x.second != y.second) return x.second < y.second;
        return (x.first + A - x.second % A) % A < (y.first + A - y.second % A) % A;
      });
    }
    for (const auto& [a, k] : order) {
      bench.setAlgorithm(algorithms[a]);
      {
        progress.show(k, a, algorithms[a]);
        Result r = bench.measure(args.sizes[k]);
        results.push_back(r);
        if (root) {
          progress.clear();
          std::printf("  %12llu %12llu %8s %11.2f %11.2f %11.2f %11.4f %11.4f %7llu  %s\n",
                      static_cast<unsigned long long>(r.bytes),
                      static_cast<unsigned long long>(r.count), collx::dataTypeName(args.dtype),
                      r.timeUs, r.p50Us, r.p99Us, r.algbw, r.busbw,
                      static_cast<unsigned long long>(r.wrong), r.algorithm.c_str());
          std::fflush(stdout);
        }
      }
    }
    progress.clear();
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
    int plotCode = 0;
    if (root && (!args.json.empty() || !args.plot.empty())) {
      const auto doc = resultsJson(args, P, hosts.size(), algorithm, transports, results);
      if (!args.json.empty() &&
          !(jsonOut >= 0 ? writeJson(jsonOut, doc) : writeJson(args.json, doc))) {
        std::fprintf(stderr, "collx-bench: cannot write --json %s\n", args.json.c_str());
      }
      if (!args.plot.empty()) {
        // The script reads the JSON: --json's file, else one of its own, removed after.
        std::optional<TempFile> temp;
        std::string json = jsonOut >= 0 ? std::string() : args.json;
        if (json.empty()) {
          temp.emplace(".json");
          json = temp->path();
          if (!writeJson(json, doc)) {
            throw collx::IoError(collx::Where{}, "cannot write the results to " + json);
          }
        }
        const std::string why = runPlot(args, {"bench", args.plot, json}, kPlotLimit);
        if (why.empty()) {
          std::printf("# plot: %s\n", args.plot.c_str());
        } else {
          std::fprintf(stderr, "collx-bench: --plot: %s\n", why.c_str());
          plotCode = kPlotFailed;
        }
      }
    }
    return anyWrong != 0 ? 3 : plotCode;
  } catch (const collx::Error& e) {
    std::fprintf(stderr, "collx-bench: %s: %s\n", collx::errorKindName(e.kind()), e.what());
    return 1;
  }
}
