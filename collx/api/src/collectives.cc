#include "collx/collectives.h"

#include <algorithm>
#include <string_view>

#include "collx/base/config.h"
#include "collx/base/log.h"
#include "collx/call.h"
#include "runtime.h"

namespace collx {

using algorithms::Collective;

struct WorkAccess {
  static Work make(std::shared_ptr<detail::Runtime> runtime,
                   std::shared_ptr<algorithms::Execution> execution) {
    Work work;
    work.runtime_ = std::move(runtime);
    work.execution_ = std::move(execution);
    return work;
  }
};

namespace {

// Who a check names when it fails (a Where, whose std::string is built only then: a call
// that passes its checks builds none).
struct Site {
  int rank = -1;
  const char* op = "";
  int peer = -1;

  operator Where() const { return Where{rank, op, peer}; }  // NOLINT(google-explicit-constructor)
};

// A Call checked against its kind and resolved into what the algorithms see: the
// collective, its memory (in place made explicit) and its per-rank layout.
struct Resolved {
  Collective coll;
  const void* input = nullptr;
  void* output = nullptr;
  std::uint64_t count = 0;
  DataType dtype = DataType::kUint8;
  const ReduceOp* op = nullptr;  // the Call's, for the collectives that reduce; else nullptr
  int root = -1;
  bool inPlace = false;
  const CollectiveOptions* options = nullptr;  // the Call's, or its function's (executeWith)
  // v-collectives (see ScheduleParams), and the count both sides fingerprint.
  Counts counts, displs, recvCounts, recvDispls;
  std::uint64_t fingerprintCount = 0;
};

struct Prepared {
  bool selectOnly = false;  // Runtime::selectOnly: the call stops after choosing
  // The call's params. A shared-memory algorithm's blocking call runs from them
  // (Engine::runShared); its schedule is looked up only where it must wait its turn.
  algorithms::ScheduleParams params;
  const algorithms::AlgorithmInfo* shared = nullptr;
  std::shared_ptr<const algorithms::Schedule> schedule;
  algorithms::Bindings bindings;
  algorithms::CallInfo info;
  algorithms::Learner::Pick trial;  // COLLX_SELECTION=learn: a call to time (trial.slot >= 0)
};

detail::Runtime& runtimeOf(Context& ctx, const char* what) {
  if (!ctx.runtime()) {
    throw InvalidArgument(Where{ctx.rank(), what, -1}, "the context has no transports");
  }
  detail::Runtime& rt = *ctx.runtime();
  if (rt.isOver()) [[unlikely]]
    rt.throwOver(Where{rt.rank, what, -1});
  return rt;
}

std::chrono::milliseconds timeoutOf(const detail::Runtime& rt, const CollectiveOptions& options,
                                    const Site& where) {
  std::chrono::milliseconds timeout = options.timeout.value_or(rt.timeout);
  if (timeout.count() <= 0) {
    throw InvalidArgument(
        where, "the timeout must be positive, got " + std::to_string(timeout.count()) + " ms");
  }
  return timeout;
}

void checkBuffer(const void* buffer, std::uint64_t count, const char* which, const Site& where) {
  if (buffer == nullptr && count > 0) {
    throw InvalidArgument(where,
                          std::string(which) + " is null with a count of " + std::to_string(count));
  }
}

// alltoallv bruck forwards blocks through other ranks, so every rank needs every rank's
// counts: an allgather of each rank's sendcounts and recvcounts, checked here on every rank
// alike (so that all of them raise the same MismatchError, none waits for the others).
// Returns the send count matrix (row i: what rank i sends).
std::vector<std::uint64_t> exchangeCounts(Context& ctx, const algorithms::ScheduleParams& params,
                                          const CollectiveOptions& callOptions, const Site& where) {
  const auto P = static_cast<std::uint64_t>(ctx.size());
  std::vector<std::uint64_t> mine(2 * P), all(2 * P * P);
  std::copy(params.counts.begin(), params.counts.end(), mine.begin());
  std::copy(params.recvCounts.begin(), params.recvCounts.end(),
            mine.begin() + static_cast<long>(P));
  CollectiveOptions options;
  options.timeout = callOptions.timeout;
  allgather(ctx, mine.data(), all.data(), 2 * P, DataType::kInt64, options);
  std::vector<std::uint64_t> matrix(P * P);
  for (std::uint64_t i = 0; i < P; ++i) {
    for (std::uint64_t j = 0; j < P; ++j) {
      const std::uint64_t sends = all[i * 2 * P + j], expects = all[j * 2 * P + P + i];
      if (sends != expects) {
        // The peer: the other side of the disagreement, seen from this rank.
        const std::uint64_t me = static_cast<std::uint64_t>(where.rank);
        const int peer = static_cast<int>(i == me ? j : i);
        throw MismatchError(Where{where.rank, where.op, peer},
                            "rank " + std::to_string(i) + " sends " + std::to_string(sends) +
                                " elements to rank " + std::to_string(j) + ", whose recvcounts[" +
                                std::to_string(i) + "] is " + std::to_string(expects));
      }
      matrix[i * P + j] = sends;
    }
  }
  return matrix;
}

Prepared prepare(Context& ctx, Resolved& call, bool blocking) {
  const char* what = algorithms::collectiveName(call.coll);
  detail::Runtime& rt = runtimeOf(ctx, what);
  Site where{rt.rank, what, -1};
  const std::size_t es = dataTypeSize(call.dtype);
  if (es == 0) throw InvalidArgument(where, "unknown data type");
  // (No division: this runs on every call.)
  std::uint64_t all = 0;
  if (__builtin_mul_overflow(call.count, es * static_cast<std::uint64_t>(rt.size), &all) ||
      all > (~std::uint64_t{0} >> 1)) {
    throw InvalidArgument(where, "count " + std::to_string(call.count) + " is too large");
  }
  if (call.root != -1 && (call.root < 0 || call.root >= rt.size)) {
    throw InvalidArgument(where, "root " + std::to_string(call.root) + " is outside [0, " +
                                     std::to_string(rt.size) + ")");
  }
  // (Only bitwise and custom ops can be refused: the others skip building a Where.)
  if (call.op != nullptr && (call.op->isBitwise() || call.op->kind() == ReduceOpKind::kCustom)) {
    call.op->validate(call.dtype, where);
  }
  Prepared p;  // (one object returned on every path: no copy of it on the way out)
  algorithms::ScheduleParams& params = p.params;
  params.coll = call.coll;
  params.rank = rt.rank;
  params.size = rt.size;
  params.count = call.count;
  params.elementSize = es;
  params.op = call.op != nullptr ? call.op->kind() : ReduceOpKind::kSum;
  params.inPlace = call.inPlace;
  params.root = call.root;
  params.chunkBytes = rt.chunkBytes;
  params.commutative = call.op == nullptr || call.op->commutative();
  // (The resolved call is this one's: its per-rank vectors move, not copied. alltoallv bruck's
  // counts exchange reads them from the params.)
  params.counts = std::move(call.counts);
  params.displs = std::move(call.displs);
  params.recvCounts = std::move(call.recvCounts);
  params.recvDispls = std::move(call.recvDispls);
  if (rt.hosts > 1) params.hostOf = rt.hostOf;
  algorithms::Choice choice =
      algorithms::select(params, rt.policy, call.options->algorithm, call.op);
  if (rt.learner && !rt.selectOnly && call.options->algorithm.empty() &&
      rt.policy.configured[static_cast<std::size_t>(call.coll)] == nullptr) [[unlikely]] {
    std::lock_guard<std::mutex> lock(rt.learnMutex);
    p.trial = rt.learner->pick(params, rt.policy, choice, blocking);
    choice = algorithms::Choice{p.trial.algorithm, p.trial.source};
  }
  const algorithms::AlgorithmInfo& algorithm = *choice.algorithm;
  COLLX_DEBUG(kAlgo, "rank {}: {} of {} bytes over {} ranks: {} (from {})", rt.rank, what,
              algorithms::selectionBytes(params), rt.size, algorithm.name, choice.source);
  if (rt.selectOnly) {
    rt.selected = &algorithm;
    p.selectOnly = true;
    return p;
  }
  if (algorithm.exchangesCounts) {
    params.countMatrix = exchangeCounts(ctx, params, *call.options, where);
  }
  if (algorithm.shared) {
    p.shared = &algorithm;  // its schedule only if it must wait its turn (runBlocking)
  } else {
    p.schedule = rt.schedule(algorithm, params);
  }
  p.bindings.input = call.input;
  p.bindings.output = call.output;
  const std::uint64_t seq = rt.sequence.fetch_add(1);
  if (seq > transport::kSeqMask) {  // after 2^40 calls (a sub-context's number lies above)
    throw InvalidArgument(where, "this context has run out of sequence numbers");
  }
  p.info.collective = what;
  p.info.algorithm = algorithm.name;
  p.info.notes.counter = detail::Runtime::counterOf(algorithm);
  p.info.notes.bytes = call.count * es;
  p.info.key = transport::MessageKey{rt.seqBase | seq, 0, transport::Space::kCollective};
  p.info.notes.recorder = rt.recorder.get();
  p.info.notes.recorderOwner = rt.recorder;
  p.info.fingerprint = transport::Fingerprint{
      static_cast<std::uint8_t>(call.coll), static_cast<std::uint8_t>(call.dtype),
      static_cast<std::uint8_t>(call.op != nullptr ? call.op->kind() : ReduceOpKind::kSum),
      call.root, call.fingerprintCount};
  p.info.dtype = call.dtype;
  p.info.divisor = static_cast<std::uint32_t>(rt.size);
  p.info.lane = rt.lane;
  p.info.spinUs = rt.spinUs;
  p.info.generation = rt.generation;
  if (call.op != nullptr) p.info.op = *call.op;
  // Members of the shared-memory group waiting for this rank in a shm call of this seq can
  // tell it runs another collective.
  if (rt.group != nullptr) rt.group->announce(seq, p.info.fingerprint);
  p.info.timeout = timeoutOf(rt, *call.options, where);
  // A shared-memory call's deadline starts when it first waits (the engine starts it; one
  // that never waits reads no clock); the others' now.
  p.info.deadline = algorithm.shared ? algorithms::Clock::time_point::max()
                                     : algorithms::Clock::now() + p.info.timeout;
  return p;
}

void runPrepared(detail::Runtime& rt, Prepared& p) {
  if (p.shared) {
    if (rt.engine->runShared(p.params, p.bindings, p.info)) return;
    p.schedule = rt.schedule(*p.shared, p.params);
  }
  rt.engine->run(std::move(p.schedule), p.bindings, std::move(p.info));
}

// COLLX_SELECTION=learn: a trial timed; once its class has tried every candidate, the ranks
// agree on the slowest rank's median per candidate (an allreduce of the maxima, over ring:
// named, so that it is no trial itself) and the learner takes the fastest.
void runTrial(Context& ctx, detail::Runtime& rt, Prepared& p) {
  const algorithms::Learner::Pick trial = p.trial;
  const auto started = algorithms::Clock::now();
  runPrepared(rt, p);
  const double seconds = std::chrono::duration<double>(algorithms::Clock::now() - started).count();
  // A rooted collective's ranks would otherwise not start the next trial together: calls
  // back to back overlap (the root returns once its data is sent), and the times would say
  // little. The ranks meet after each trial, as collx-bench fences these calls. (Not before:
  // this call's sequence number is taken, and a call of a later one must not run first.)
  switch (p.params.coll) {
    case algorithms::Collective::kBroadcast:
    case algorithms::Collective::kReduce:
    case algorithms::Collective::kGather:
    case algorithms::Collective::kGatherv:
    case algorithms::Collective::kScatter:
    case algorithms::Collective::kScatterv: {
      // (Named, so that the fence is no trial itself: the shared-memory barrier where the
      // ranks share memory, the one that releases them closest together.)
      CollectiveOptions fence;
      fence.algorithm = rt.policy.sharedMemory ? "shm" : "dissemination";
      barrier(ctx, fence);
      break;
    }
    default:
      break;
  }
  std::vector<double> times;
  {
    std::lock_guard<std::mutex> lock(rt.learnMutex);
    if (!rt.learner->record(trial, seconds)) return;
    times = rt.learner->offer(trial.slot);
  }
  AllreduceOptions options;
  options.algorithm = "ring";
  options.op = ReduceOpKind::kMax;
  allreduce(ctx, times.data(), times.data(), times.size(), DataType::kFloat64, options);
  std::lock_guard<std::mutex> lock(rt.learnMutex);
  const algorithms::AlgorithmInfo& chosen = rt.learner->decide(trial.slot, times);
  COLLX_DEBUG(kAlgo, "rank {}: learned {} over {} ranks: {} ({})", rt.rank,
              rt.learner->describe(trial.slot), rt.size, chosen.name,
              rt.learner->describeTimes(trial.slot, times));
}

void runPreparedCall(Context& ctx, Resolved&& call);

void runBlocking(Context& ctx, Resolved&& call) {
  if (!call.options->uniform) return runPreparedCall(ctx, std::move(call));
  const char* what = algorithms::collectiveName(call.coll);
  const std::optional<std::chrono::milliseconds> timeout = call.options->timeout;
  std::exception_ptr mine;
  try {
    runPreparedCall(ctx, std::move(call));
  } catch (const Error&) {
    mine = std::current_exception();
  }
  // Bit 0: this rank's part succeeded.
  const Agreement agreed = ctx.agree(mine ? ~std::uint64_t{1} : ~std::uint64_t{0}, timeout);
  if ((agreed.flags & 1) != 0 && agreed.failed.empty()) return;
  if (mine) std::rethrow_exception(mine);
  std::string failed;
  for (int r : agreed.failed) failed += (failed.empty() ? "" : ", ") + std::to_string(r);
  const Where where{ctx.rank(), std::string(what) + " (uniform)", -1};
  const std::string text =
      "this rank's part completed, but not every rank's" +
      (failed.empty()
           ? std::string(" (a rank's part failed)")
           : " (failed rank" + std::string(agreed.failed.size() > 1 ? "s " : " ") + failed + ")") +
      ": the call failed on every rank, and its result must not be used";
  if (const std::exception_ptr context = ctx.runtime()->engine->failure()) {
    try {
      std::rethrow_exception(context);
    } catch (const Error& e) {
      throwError(e.kind(), where, text + " (" + e.what() + ")");
    }
  }
  throw IoError(where, text);
}

void runPreparedCall(Context& ctx, Resolved&& call) {
  Prepared p = prepare(ctx, call, /*blocking=*/true);
  if (p.selectOnly) return;
  detail::Runtime& rt = *ctx.runtime();
  if (p.trial.slot >= 0) [[unlikely]] {
    return runTrial(ctx, rt, p);
  }
  runPrepared(rt, p);
}

Work runAsync(Context& ctx, Resolved&& call) {
  if (call.options->uniform) {
    throw InvalidArgument(Where{ctx.rank(), algorithms::collectiveName(call.coll), -1},
                          "a uniform call is blocking: CollectiveOptions::uniform with a "
                          "nonblocking call");
  }
  Prepared p = prepare(ctx, call, /*blocking=*/false);
  if (p.selectOnly) return Work{};
  if (p.shared) p.schedule = ctx.runtime()->schedule(*p.shared, p.params);
  auto execution =
      ctx.runtime()->engine->start(std::move(p.schedule), p.bindings, std::move(p.info));
  return WorkAccess::make(ctx.runtime(), std::move(execution));
}

// ---- each kind's checks: a Call resolved for prepare() ---------------------------------

void checkRoot(int root, int size, const Site& where) {
  if (root < 0 || root >= size) {
    throw InvalidArgument(
        where, "root " + std::to_string(root) + " is outside [0, " + std::to_string(size) + ")");
  }
}

// Per-rank counts and displacements: one per rank, blocks that do not overlap.
void checkLayout(const Counts& counts, const Counts* displs, int size, const char* what,
                 const Site& where) {
  if (static_cast<int>(counts.size()) != size) {
    throw InvalidArgument(where, std::string(what) + " has " + std::to_string(counts.size()) +
                                     " entries for " + std::to_string(size) + " ranks");
  }
  if (displs == nullptr) return;
  if (static_cast<int>(displs->size()) != size) {
    throw InvalidArgument(where, std::string("the displacements have ") +
                                     std::to_string(displs->size()) + " entries for " +
                                     std::to_string(size) + " ranks");
  }
  std::vector<std::pair<std::uint64_t, int>> order;
  for (int i = 0; i < size; ++i) {
    if (counts[i] > 0) order.emplace_back((*displs)[i], i);
  }
  std::sort(order.begin(), order.end());
  for (std::size_t k = 1; k < order.size(); ++k) {
    const int a = order[k - 1].second, b = order[k].second;
    if ((*displs)[a] + counts[a] > (*displs)[b]) {
      throw InvalidArgument(where, "the blocks of ranks " + std::to_string(a) + " and " +
                                       std::to_string(b) + " overlap in the buffer");
    }
  }
}

Counts prefixSums(const Counts& counts) {
  Counts out(counts.size());
  std::uint64_t at = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    out[i] = at;
    at += counts[i];
  }
  return out;
}

std::uint64_t total(const Counts& counts) {
  std::uint64_t sum = 0;
  for (std::uint64_t c : counts) sum += c;
  return sum;
}

Counts uniform(int size, std::uint64_t count) {
  return Counts(static_cast<std::size_t>(size), count);
}

Counts uniformDispls(int size, std::uint64_t count) {
  Counts out(static_cast<std::size_t>(size));
  for (int i = 0; i < size; ++i) out[i] = static_cast<std::uint64_t>(i) * count;
  return out;
}

// A v-collective's per-rank vector, which its Call must carry.
const Counts& required(const Counts* counts, const char* what, const Site& where) {
  if (counts == nullptr) throw InvalidArgument(where, std::string(what) + " are missing");
  return *counts;
}

// A v-collective's displacements: the Call's, or (nullptr) its blocks packed in rank order.
Counts displacements(const Counts* displs, const Counts& counts) {
  return displs != nullptr ? *displs : prefixSums(counts);
}

Resolved resolveAllreduce(Context& ctx, const Call& d) {
  Site where{ctx.rank(), "allreduce", -1};
  checkBuffer(d.sendbuf, d.count, "sendbuf", where);
  checkBuffer(d.recvbuf, d.count, "recvbuf", where);
  Resolved c;
  c.coll = Collective::kAllreduce;
  c.input = d.sendbuf;
  c.output = d.recvbuf;
  c.count = d.count;
  c.dtype = d.dtype;
  c.op = &d.op;
  c.inPlace = d.sendbuf == d.recvbuf;
  c.fingerprintCount = d.count;
  return c;
}

Resolved resolveAllgather(Context& ctx, const Call& d) {
  Site where{ctx.rank(), "allgather", -1};
  checkBuffer(d.recvbuf, d.count, "recvbuf", where);
  const auto* own = static_cast<const std::uint8_t*>(d.recvbuf) +
                    d.count * dataTypeSize(d.dtype) * static_cast<std::uint64_t>(ctx.rank());
  Resolved c;
  c.coll = Collective::kAllgather;
  c.inPlace = d.sendbuf == nullptr || d.sendbuf == own;
  c.input = c.inPlace ? own : d.sendbuf;
  c.output = d.recvbuf;
  c.count = d.count;
  c.dtype = d.dtype;
  c.fingerprintCount = d.count;
  return c;
}

Resolved resolveBroadcast(Context& ctx, const Call& d) {
  Site where{ctx.rank(), "broadcast", -1};
  checkBuffer(d.recvbuf, d.count, "buffer", where);
  checkRoot(d.root, ctx.size(), where);
  Resolved c;
  c.coll = Collective::kBroadcast;
  c.input = d.recvbuf;
  c.output = d.recvbuf;
  c.count = d.count;
  c.dtype = d.dtype;
  c.root = d.root;
  c.inPlace = true;
  c.fingerprintCount = d.count;
  return c;
}

Resolved resolveBarrier() {
  Resolved c;
  c.coll = Collective::kBarrier;
  return c;
}

Resolved resolveAllgatherv(Context& ctx, const Call& d) {
  Site where{ctx.rank(), "allgatherv", -1};
  const Counts& recvcounts = required(d.counts, "recvcounts", where);
  Counts displs = displacements(d.displs, recvcounts);
  checkLayout(recvcounts, &displs, ctx.size(), "recvcounts", where);
  if (d.count != recvcounts[ctx.rank()]) {
    throw InvalidArgument(where, "sendcount " + std::to_string(d.count) +
                                     " differs from recvcounts[" + std::to_string(ctx.rank()) +
                                     "] = " + std::to_string(recvcounts[ctx.rank()]));
  }
  checkBuffer(d.recvbuf, total(recvcounts), "recvbuf", where);
  const auto* own =
      static_cast<const std::uint8_t*>(d.recvbuf) + displs[ctx.rank()] * dataTypeSize(d.dtype);
  Resolved c;
  c.coll = Collective::kAllgatherv;
  c.inPlace = d.sendbuf == nullptr || d.sendbuf == own;
  if (!c.inPlace) checkBuffer(d.sendbuf, d.count, "sendbuf", where);
  c.input = c.inPlace ? own : d.sendbuf;
  c.output = d.recvbuf;
  c.count = d.count;
  c.dtype = d.dtype;
  c.counts = recvcounts;
  c.displs = std::move(displs);
  c.fingerprintCount = total(recvcounts);
  return c;
}

// reduce_scatter and reduce_scatterv: `recvcounts` the Call's (copied) or made for it.
Resolved resolveReduceScatter(Context& ctx, const Call& d, Counts recvcounts) {
  Site where{ctx.rank(), "reduce_scatter", -1};
  checkLayout(recvcounts, nullptr, ctx.size(), "recvcounts", where);
  checkBuffer(d.sendbuf, total(recvcounts), "sendbuf", where);
  checkBuffer(d.recvbuf, recvcounts[ctx.rank()], "recvbuf", where);
  if (d.sendbuf == d.recvbuf && total(recvcounts) > 0) {
    throw InvalidArgument(where,
                          "sendbuf and recvbuf are the same buffer: reduce_scatter "
                          "works out of place");
  }
  Resolved c;
  c.coll = Collective::kReduceScatter;
  c.input = d.sendbuf;
  c.output = d.recvbuf;
  c.count = recvcounts[ctx.rank()];
  c.dtype = d.dtype;
  c.op = &d.op;
  c.displs = prefixSums(recvcounts);
  c.fingerprintCount = total(recvcounts);
  c.counts = std::move(recvcounts);
  return c;
}

Resolved resolveReduce(Context& ctx, const Call& d) {
  Site where{ctx.rank(), "reduce", -1};
  checkRoot(d.root, ctx.size(), where);
  checkBuffer(d.sendbuf, d.count, "sendbuf", where);
  if (ctx.rank() == d.root) checkBuffer(d.recvbuf, d.count, "recvbuf", where);
  Resolved c;
  c.coll = Collective::kReduce;
  c.input = d.sendbuf;
  c.output = d.recvbuf;
  c.count = d.count;
  c.dtype = d.dtype;
  c.op = &d.op;
  c.root = d.root;
  c.inPlace = ctx.rank() == d.root && d.sendbuf == d.recvbuf;
  c.fingerprintCount = d.count;
  return c;
}

// gather and gatherv: `recvcounts` and `displs` the Call's (copied) or made for it.
Resolved resolveGather(Context& ctx, const Call& d, Collective coll, Counts recvcounts,
                       Counts displs) {
  const char* what = algorithms::collectiveName(coll);
  Site where{ctx.rank(), what, -1};
  checkRoot(d.root, ctx.size(), where);
  const int root = d.root;
  const bool isRoot = ctx.rank() == root;
  const std::size_t es = dataTypeSize(d.dtype);
  Resolved c;
  c.coll = coll;
  c.root = root;
  c.dtype = d.dtype;
  c.count = d.count;
  c.output = d.recvbuf;
  c.input = d.sendbuf;
  if (isRoot) {
    checkLayout(recvcounts, &displs, ctx.size(), "recvcounts", where);
    checkBuffer(d.recvbuf, total(recvcounts), "recvbuf", where);
    if (d.sendbuf == nullptr) {  // in place: the root's block is already in recvbuf
      c.inPlace = true;
      c.input = static_cast<const std::uint8_t*>(d.recvbuf) + displs[root] * es;
      c.count = recvcounts[root];
    } else if (d.count != recvcounts[root]) {
      throw InvalidArgument(where, "sendcount " + std::to_string(d.count) +
                                       " differs from recvcounts[" + std::to_string(root) +
                                       "] = " + std::to_string(recvcounts[root]));
    }
    c.counts = std::move(recvcounts);
    c.displs = std::move(displs);
  } else if (static_cast<int>(recvcounts.size()) == ctx.size()) {
    c.counts = std::move(recvcounts);  // the binomial algorithm forwards its subtree's blocks
  }
  if (!c.inPlace) checkBuffer(d.sendbuf, c.count, "sendbuf", where);
  c.fingerprintCount = coll == Collective::kGather ? d.count : 0;
  return c;
}

// scatter and scatterv: `sendcounts` and `displs` the Call's (copied) or made for it.
Resolved resolveScatter(Context& ctx, const Call& d, Collective coll, Counts sendcounts,
                        Counts displs) {
  const char* what = algorithms::collectiveName(coll);
  Site where{ctx.rank(), what, -1};
  checkRoot(d.root, ctx.size(), where);
  const int root = d.root;
  const bool isRoot = ctx.rank() == root;
  const std::size_t es = dataTypeSize(d.dtype);
  Resolved c;
  c.coll = coll;
  c.root = root;
  c.dtype = d.dtype;
  c.count = d.count;
  c.input = d.sendbuf;
  c.output = d.recvbuf;
  if (isRoot) {
    checkLayout(sendcounts, &displs, ctx.size(), "sendcounts", where);
    checkBuffer(d.sendbuf, total(sendcounts), "sendbuf", where);
    if (d.recvbuf == nullptr) {  // in place: the root's block stays in sendbuf
      c.inPlace = true;
      c.output = const_cast<std::uint8_t*>(static_cast<const std::uint8_t*>(d.sendbuf)) +
                 displs[root] * es;
      c.count = sendcounts[root];
    } else if (d.count != sendcounts[root]) {
      throw InvalidArgument(where, "recvcount " + std::to_string(d.count) +
                                       " differs from sendcounts[" + std::to_string(root) +
                                       "] = " + std::to_string(sendcounts[root]));
    }
    c.counts = std::move(sendcounts);
    c.displs = std::move(displs);
  } else if (static_cast<int>(sendcounts.size()) == ctx.size()) {
    c.counts = std::move(sendcounts);  // the binomial algorithm forwards its subtree's blocks
  }
  if (!c.inPlace) checkBuffer(d.recvbuf, c.count, "recvbuf", where);
  c.fingerprintCount = coll == Collective::kScatter ? d.count : 0;
  return c;
}

// alltoall and alltoallv: the per-peer vectors the Call's (copied) or made for it; `count`
// the equal count of alltoall (0 for alltoallv).
Resolved resolveAlltoall(Context& ctx, const Call& d, Collective coll, Counts sendcounts,
                         Counts sdispls, Counts recvcounts, Counts rdispls, std::uint64_t count) {
  const char* what = algorithms::collectiveName(coll);
  Site where{ctx.rank(), what, -1};
  checkLayout(sendcounts, &sdispls, ctx.size(), "sendcounts", where);
  checkLayout(recvcounts, &rdispls, ctx.size(), "recvcounts", where);
  checkBuffer(d.sendbuf, total(sendcounts), "sendbuf", where);
  checkBuffer(d.recvbuf, total(recvcounts), "recvbuf", where);
  if (d.sendbuf == d.recvbuf && total(sendcounts) > 0) {
    throw InvalidArgument(where, std::string("sendbuf and recvbuf are the same buffer: ") + what +
                                     " works out of place");
  }
  const int self = ctx.rank();
  if (sendcounts[self] != recvcounts[self]) {
    throw InvalidArgument(
        where, "sendcounts[" + std::to_string(self) + "] = " + std::to_string(sendcounts[self]) +
                   " differs from recvcounts[" + std::to_string(self) + "] = " +
                   std::to_string(recvcounts[self]) + " (the block this rank sends itself)");
  }
  Resolved c;
  c.coll = coll;
  c.input = d.sendbuf;
  c.output = d.recvbuf;
  c.count = count;
  c.dtype = d.dtype;
  c.counts = std::move(sendcounts);
  c.displs = std::move(sdispls);
  c.recvCounts = std::move(recvcounts);
  c.recvDispls = std::move(rdispls);
  c.fingerprintCount = coll == Collective::kAlltoall ? count : 0;
  return c;
}

// Every collective kind's Call, checked and resolved (send and recv take prepareP2P).
Resolved resolveKind(Context& ctx, const Call& d) {
  const int P = ctx.size();
  switch (d.kind) {
    case CallKind::kAllreduce:
      return resolveAllreduce(ctx, d);
    case CallKind::kReduce:
      return resolveReduce(ctx, d);
    case CallKind::kBroadcast:
      return resolveBroadcast(ctx, d);
    case CallKind::kAllgather:
      return resolveAllgather(ctx, d);
    case CallKind::kAllgatherv:
      return resolveAllgatherv(ctx, d);
    case CallKind::kReduceScatter:
      return resolveReduceScatter(ctx, d, uniform(P, d.count));
    case CallKind::kReduceScatterv:
      return resolveReduceScatter(
          ctx, d, required(d.counts, "recvcounts", Site{ctx.rank(), "reduce_scatter", -1}));
    case CallKind::kGather:
      return resolveGather(ctx, d, Collective::kGather, uniform(P, d.count),
                           uniformDispls(P, d.count));
    case CallKind::kGatherv: {
      Site where{ctx.rank(), "gatherv", -1};
      const Counts& recvcounts = required(d.counts, "recvcounts", where);
      return resolveGather(ctx, d, Collective::kGatherv, recvcounts,
                           displacements(d.displs, recvcounts));
    }
    case CallKind::kScatter:
      return resolveScatter(ctx, d, Collective::kScatter, uniform(P, d.count),
                            uniformDispls(P, d.count));
    case CallKind::kScatterv: {
      Site where{ctx.rank(), "scatterv", -1};
      const Counts& sendcounts = required(d.counts, "sendcounts", where);
      return resolveScatter(ctx, d, Collective::kScatterv, sendcounts,
                            displacements(d.displs, sendcounts));
    }
    case CallKind::kAlltoall:
      return resolveAlltoall(ctx, d, Collective::kAlltoall, uniform(P, d.count),
                             uniformDispls(P, d.count), uniform(P, d.count),
                             uniformDispls(P, d.count), d.count);
    case CallKind::kAlltoallv: {
      Site where{ctx.rank(), "alltoallv", -1};
      const Counts& sendcounts = required(d.counts, "sendcounts", where);
      const Counts& recvcounts = required(d.recvCounts, "recvcounts", where);
      return resolveAlltoall(ctx, d, Collective::kAlltoallv, sendcounts,
                             displacements(d.displs, sendcounts), recvcounts,
                             displacements(d.recvDispls, recvcounts), 0);
    }
    case CallKind::kBarrier:
      return resolveBarrier();
    case CallKind::kSend:
    case CallKind::kRecv:
      break;
  }
  throw InvalidArgument(Where{ctx.rank(), "call", -1},
                        "unknown call kind " + std::to_string(static_cast<int>(d.kind)));
}

// `options`: the Call's own, or those of the collectives.h function that built it (which
// leaves the Call's default: no copy of them on the way).
Resolved resolve(Context& ctx, const Call& d, const CollectiveOptions& options) {
  Resolved r = resolveKind(ctx, d);
  r.options = &options;
  return r;
}

// Point to point: one transfer, its key the user's tag.
Prepared prepareP2P(Context& ctx, const Call& d, const CollectiveOptions& options) {
  const bool sending = d.kind == CallKind::kSend;
  const char* what = sending ? "send" : "recv";
  const void* buffer = sending ? d.sendbuf : d.recvbuf;
  detail::Runtime& rt = runtimeOf(ctx, what);
  Site where{rt.rank, what, d.peer};
  checkBuffer(buffer, d.count, "buffer", where);
  if (d.peer < 0 || d.peer >= rt.size) {
    throw InvalidArgument(where, "peer " + std::to_string(d.peer) + " is outside [0, " +
                                     std::to_string(rt.size) + ")");
  }
  if (d.tag > transport::kSeqMask) {
    throw InvalidArgument(where, "tag " + std::to_string(d.tag) + " is above the largest, 2^" +
                                     std::to_string(transport::kSubContextShift) + " - 1");
  }
  const std::uint64_t bytes = d.count * dataTypeSize(d.dtype);
  auto schedule = std::make_shared<algorithms::Schedule>(what);
  if (sending) {
    schedule->send(rt.meshRank(d.peer), 0, algorithms::input(), bytes);
  } else {
    schedule->recv(rt.meshRank(d.peer), 0, algorithms::output(), bytes);
  }
  schedule->finalize();
  Prepared p;
  p.schedule = std::move(schedule);
  p.bindings.input = buffer;
  p.bindings.output = const_cast<void*>(buffer);
  p.info.collective = what;
  p.info.peer = d.peer;
  p.info.notes.counter = sending ? detail::Runtime::sendCounter() : detail::Runtime::recvCounter();
  p.info.notes.bytes = bytes;
  p.info.key = transport::MessageKey{rt.seqBase | d.tag, 0, transport::Space::kPointToPoint};
  p.info.spinUs = rt.spinUs;
  p.info.generation = rt.generation;
  p.info.notes.recorder = rt.recorder.get();
  p.info.notes.recorderOwner = rt.recorder;
  p.info.fingerprint = transport::Fingerprint{static_cast<std::uint8_t>(Collective::kSendRecv),
                                              static_cast<std::uint8_t>(d.dtype), 0, -1, d.count};
  p.info.dtype = d.dtype;
  p.info.timeout = timeoutOf(rt, options, where);
  p.info.deadline = algorithms::Clock::now() + p.info.timeout;
  return p;
}

bool pointToPoint(const Call& d) { return d.kind == CallKind::kSend || d.kind == CallKind::kRecv; }

void executeWith(Context& ctx, const Call& call, const CollectiveOptions& options) {
  if (pointToPoint(call)) {
    Prepared p = prepareP2P(ctx, call, options);
    ctx.runtime()->engine->run(std::move(p.schedule), p.bindings, std::move(p.info));
    return;
  }
  runBlocking(ctx, resolve(ctx, call, options));
}

Work startWith(Context& ctx, const Call& call, const CollectiveOptions& options) {
  if (pointToPoint(call)) {
    Prepared p = prepareP2P(ctx, call, options);
    auto e = ctx.runtime()->engine->start(std::move(p.schedule), p.bindings, std::move(p.info));
    return WorkAccess::make(ctx.runtime(), std::move(e));
  }
  return runAsync(ctx, resolve(ctx, call, options));
}

// The Calls the functions of collectives.h build (their options go beside: executeWith).
Call describe(CallKind kind, const void* sendbuf, void* recvbuf, std::uint64_t count,
              DataType dtype) {
  Call c;
  c.kind = kind;
  c.sendbuf = sendbuf;
  c.recvbuf = recvbuf;
  c.count = count;
  c.dtype = dtype;
  return c;
}

Call reduction(CallKind kind, const void* sendbuf, void* recvbuf, std::uint64_t count,
               DataType dtype, int root, const AllreduceOptions& options) {
  Call c = describe(kind, sendbuf, recvbuf, count, dtype);
  c.op = options.op;
  c.root = root;
  return c;
}

Call rooted(CallKind kind, const void* sendbuf, void* recvbuf, std::uint64_t count, DataType dtype,
            int root) {
  Call c = describe(kind, sendbuf, recvbuf, count, dtype);
  c.root = root;
  return c;
}

Call pointToPointCall(CallKind kind, const void* sendbuf, void* recvbuf, std::uint64_t count,
                      DataType dtype, int peer, std::uint64_t tag) {
  Call c = describe(kind, sendbuf, recvbuf, count, dtype);
  c.peer = peer;
  c.tag = tag;
  return c;
}

Call allgathervCall(const void* sendbuf, std::uint64_t sendcount, void* recvbuf,
                    const Counts& recvcounts, const Counts& displs, DataType dtype) {
  Call c = describe(CallKind::kAllgatherv, sendbuf, recvbuf, sendcount, dtype);
  c.counts = &recvcounts;
  c.displs = &displs;
  return c;
}

Call reduceScattervCall(const void* sendbuf, void* recvbuf, const Counts& recvcounts,
                        DataType dtype, const ReduceOptions& options) {  // (for its op)
  Call c = reduction(CallKind::kReduceScatterv, sendbuf, recvbuf, 0, dtype, 0, options);
  c.counts = &recvcounts;
  return c;
}

Call gathervCall(const void* sendbuf, std::uint64_t sendcount, void* recvbuf,
                 const Counts& recvcounts, const Counts& displs, DataType dtype, int root) {
  Call c = rooted(CallKind::kGatherv, sendbuf, recvbuf, sendcount, dtype, root);
  c.counts = &recvcounts;
  c.displs = &displs;
  return c;
}

Call scattervCall(const void* sendbuf, const Counts& sendcounts, const Counts& displs,
                  void* recvbuf, std::uint64_t recvcount, DataType dtype, int root) {
  Call c = rooted(CallKind::kScatterv, sendbuf, recvbuf, recvcount, dtype, root);
  c.counts = &sendcounts;
  c.displs = &displs;
  return c;
}

Call alltoallvCall(const void* sendbuf, const Counts& sendcounts, const Counts& sdispls,
                   void* recvbuf, const Counts& recvcounts, const Counts& rdispls, DataType dtype) {
  Call c = describe(CallKind::kAlltoallv, sendbuf, recvbuf, 0, dtype);
  c.counts = &sendcounts;
  c.displs = &sdispls;
  c.recvCounts = &recvcounts;
  c.recvDispls = &rdispls;
  return c;
}

}  // namespace

const char* callKindName(CallKind kind) noexcept {
  switch (kind) {
    case CallKind::kAllreduce:
      return "allreduce";
    case CallKind::kReduce:
      return "reduce";
    case CallKind::kBroadcast:
      return "broadcast";
    case CallKind::kAllgather:
      return "allgather";
    case CallKind::kAllgatherv:
      return "allgatherv";
    case CallKind::kReduceScatter:
      return "reduce_scatter";
    case CallKind::kReduceScatterv:
      return "reduce_scatterv";
    case CallKind::kGather:
      return "gather";
    case CallKind::kGatherv:
      return "gatherv";
    case CallKind::kScatter:
      return "scatter";
    case CallKind::kScatterv:
      return "scatterv";
    case CallKind::kAlltoall:
      return "alltoall";
    case CallKind::kAlltoallv:
      return "alltoallv";
    case CallKind::kBarrier:
      return "barrier";
    case CallKind::kSend:
      return "send";
    case CallKind::kRecv:
      return "recv";
  }
  return "unknown";
}

void execute(Context& ctx, const Call& call) { executeWith(ctx, call, call.options); }

Work start(Context& ctx, const Call& call) { return startWith(ctx, call, call.options); }

bool Work::wait(std::optional<std::chrono::milliseconds> timeout) {
  if (!valid()) throw InvalidArgument(Where{-1, "Work::wait", -1}, "an empty Work");
  std::optional<algorithms::Clock::time_point> until;
  if (timeout) until = algorithms::Clock::now() + *timeout;
  return runtime_->engine->wait(*execution_, until);
}

std::exception_ptr Work::error() const {
  return execution_ ? algorithms::Engine::errorOf(*execution_) : nullptr;
}

bool Work::test() {
  if (!valid()) throw InvalidArgument(Where{-1, "Work::test", -1}, "an empty Work");
  try {
    return runtime_->engine->test(*execution_);
  } catch (const Error&) {
    return true;  // ended, with an error: error() has it
  }
}

// ---- the functions of collectives.h: each builds its Call ------------------------------

void allreduce(Context& ctx, const void* sendbuf, void* recvbuf, std::uint64_t count,
               DataType dtype, const AllreduceOptions& options) {
  executeWith(ctx, reduction(CallKind::kAllreduce, sendbuf, recvbuf, count, dtype, 0, options),
              options);
}
Work allreduceAsync(Context& ctx, const void* sendbuf, void* recvbuf, std::uint64_t count,
                    DataType dtype, const AllreduceOptions& options) {
  return startWith(ctx, reduction(CallKind::kAllreduce, sendbuf, recvbuf, count, dtype, 0, options),
                   options);
}

void allgather(Context& ctx, const void* sendbuf, void* recvbuf, std::uint64_t count,
               DataType dtype, const CollectiveOptions& options) {
  executeWith(ctx, describe(CallKind::kAllgather, sendbuf, recvbuf, count, dtype), options);
}
Work allgatherAsync(Context& ctx, const void* sendbuf, void* recvbuf, std::uint64_t count,
                    DataType dtype, const CollectiveOptions& options) {
  return startWith(ctx, describe(CallKind::kAllgather, sendbuf, recvbuf, count, dtype), options);
}

void allgatherv(Context& ctx, const void* sendbuf, std::uint64_t sendcount, void* recvbuf,
                const Counts& recvcounts, const Counts& displs, DataType dtype,
                const CollectiveOptions& options) {
  executeWith(ctx, allgathervCall(sendbuf, sendcount, recvbuf, recvcounts, displs, dtype), options);
}
Work allgathervAsync(Context& ctx, const void* sendbuf, std::uint64_t sendcount, void* recvbuf,
                     const Counts& recvcounts, const Counts& displs, DataType dtype,
                     const CollectiveOptions& options) {
  return startWith(ctx, allgathervCall(sendbuf, sendcount, recvbuf, recvcounts, displs, dtype),
                   options);
}

void reduceScatter(Context& ctx, const void* sendbuf, void* recvbuf, std::uint64_t recvcount,
                   DataType dtype, const ReduceOptions& options) {
  executeWith(ctx,
              reduction(CallKind::kReduceScatter, sendbuf, recvbuf, recvcount, dtype, 0, options),
              options);
}
Work reduceScatterAsync(Context& ctx, const void* sendbuf, void* recvbuf, std::uint64_t recvcount,
                        DataType dtype, const ReduceOptions& options) {
  return startWith(
      ctx, reduction(CallKind::kReduceScatter, sendbuf, recvbuf, recvcount, dtype, 0, options),
      options);
}

void reduceScatterv(Context& ctx, const void* sendbuf, void* recvbuf, const Counts& recvcounts,
                    DataType dtype, const ReduceOptions& options) {
  executeWith(ctx, reduceScattervCall(sendbuf, recvbuf, recvcounts, dtype, options), options);
}
Work reduceScattervAsync(Context& ctx, const void* sendbuf, void* recvbuf, const Counts& recvcounts,
                         DataType dtype, const ReduceOptions& options) {
  return startWith(ctx, reduceScattervCall(sendbuf, recvbuf, recvcounts, dtype, options), options);
}

void reduce(Context& ctx, const void* sendbuf, void* recvbuf, std::uint64_t count, DataType dtype,
            int root, const ReduceOptions& options) {
  executeWith(ctx, reduction(CallKind::kReduce, sendbuf, recvbuf, count, dtype, root, options),
              options);
}
Work reduceAsync(Context& ctx, const void* sendbuf, void* recvbuf, std::uint64_t count,
                 DataType dtype, int root, const ReduceOptions& options) {
  return startWith(ctx, reduction(CallKind::kReduce, sendbuf, recvbuf, count, dtype, root, options),
                   options);
}

void gather(Context& ctx, const void* sendbuf, void* recvbuf, std::uint64_t count, DataType dtype,
            int root, const CollectiveOptions& options) {
  executeWith(ctx, rooted(CallKind::kGather, sendbuf, recvbuf, count, dtype, root), options);
}
Work gatherAsync(Context& ctx, const void* sendbuf, void* recvbuf, std::uint64_t count,
                 DataType dtype, int root, const CollectiveOptions& options) {
  return startWith(ctx, rooted(CallKind::kGather, sendbuf, recvbuf, count, dtype, root), options);
}

void gatherv(Context& ctx, const void* sendbuf, std::uint64_t sendcount, void* recvbuf,
             const Counts& recvcounts, const Counts& displs, DataType dtype, int root,
             const CollectiveOptions& options) {
  executeWith(ctx, gathervCall(sendbuf, sendcount, recvbuf, recvcounts, displs, dtype, root),
              options);
}
Work gathervAsync(Context& ctx, const void* sendbuf, std::uint64_t sendcount, void* recvbuf,
                  const Counts& recvcounts, const Counts& displs, DataType dtype, int root,
                  const CollectiveOptions& options) {
  return startWith(ctx, gathervCall(sendbuf, sendcount, recvbuf, recvcounts, displs, dtype, root),
                   options);
}

void scatter(Context& ctx, const void* sendbuf, void* recvbuf, std::uint64_t count, DataType dtype,
             int root, const CollectiveOptions& options) {
  executeWith(ctx, rooted(CallKind::kScatter, sendbuf, recvbuf, count, dtype, root), options);
}
Work scatterAsync(Context& ctx, const void* sendbuf, void* recvbuf, std::uint64_t count,
                  DataType dtype, int root, const CollectiveOptions& options) {
  return startWith(ctx, rooted(CallKind::kScatter, sendbuf, recvbuf, count, dtype, root), options);
}

void scatterv(Context& ctx, const void* sendbuf, const Counts& sendcounts, const Counts& displs,
              void* recvbuf, std::uint64_t recvcount, DataType dtype, int root,
              const CollectiveOptions& options) {
  executeWith(ctx, scattervCall(sendbuf, sendcounts, displs, recvbuf, recvcount, dtype, root),
              options);
}
Work scattervAsync(Context& ctx, const void* sendbuf, const Counts& sendcounts,
                   const Counts& displs, void* recvbuf, std::uint64_t recvcount, DataType dtype,
                   int root, const CollectiveOptions& options) {
  return startWith(ctx, scattervCall(sendbuf, sendcounts, displs, recvbuf, recvcount, dtype, root),
                   options);
}

void alltoall(Context& ctx, const void* sendbuf, void* recvbuf, std::uint64_t count, DataType dtype,
              const CollectiveOptions& options) {
  executeWith(ctx, describe(CallKind::kAlltoall, sendbuf, recvbuf, count, dtype), options);
}
Work alltoallAsync(Context& ctx, const void* sendbuf, void* recvbuf, std::uint64_t count,
                   DataType dtype, const CollectiveOptions& options) {
  return startWith(ctx, describe(CallKind::kAlltoall, sendbuf, recvbuf, count, dtype), options);
}

void alltoallv(Context& ctx, const void* sendbuf, const Counts& sendcounts, const Counts& sdispls,
               void* recvbuf, const Counts& recvcounts, const Counts& rdispls, DataType dtype,
               const CollectiveOptions& options) {
  executeWith(ctx, alltoallvCall(sendbuf, sendcounts, sdispls, recvbuf, recvcounts, rdispls, dtype),
              options);
}
Work alltoallvAsync(Context& ctx, const void* sendbuf, const Counts& sendcounts,
                    const Counts& sdispls, void* recvbuf, const Counts& recvcounts,
                    const Counts& rdispls, DataType dtype, const CollectiveOptions& options) {
  return startWith(ctx,
                   alltoallvCall(sendbuf, sendcounts, sdispls, recvbuf, recvcounts, rdispls, dtype),
                   options);
}

void broadcast(Context& ctx, void* buffer, std::uint64_t count, DataType dtype, int root,
               const CollectiveOptions& options) {
  executeWith(ctx, rooted(CallKind::kBroadcast, nullptr, buffer, count, dtype, root), options);
}
Work broadcastAsync(Context& ctx, void* buffer, std::uint64_t count, DataType dtype, int root,
                    const CollectiveOptions& options) {
  return startWith(ctx, rooted(CallKind::kBroadcast, nullptr, buffer, count, dtype, root), options);
}

void barrier(Context& ctx, const CollectiveOptions& options) {
  executeWith(ctx, describe(CallKind::kBarrier, nullptr, nullptr, 0, DataType::kUint8), options);
}
Work barrierAsync(Context& ctx, const CollectiveOptions& options) {
  return startWith(ctx, describe(CallKind::kBarrier, nullptr, nullptr, 0, DataType::kUint8),
                   options);
}

void send(Context& ctx, const void* buffer, std::uint64_t count, DataType dtype, int peer,
          std::uint64_t tag, const CollectiveOptions& options) {
  executeWith(ctx, pointToPointCall(CallKind::kSend, buffer, nullptr, count, dtype, peer, tag),
              options);
}
void recv(Context& ctx, void* buffer, std::uint64_t count, DataType dtype, int peer,
          std::uint64_t tag, const CollectiveOptions& options) {
  executeWith(ctx, pointToPointCall(CallKind::kRecv, nullptr, buffer, count, dtype, peer, tag),
              options);
}
Work sendAsync(Context& ctx, const void* buffer, std::uint64_t count, DataType dtype, int peer,
               std::uint64_t tag, const CollectiveOptions& options) {
  return startWith(ctx, pointToPointCall(CallKind::kSend, buffer, nullptr, count, dtype, peer, tag),
                   options);
}
Work recvAsync(Context& ctx, void* buffer, std::uint64_t count, DataType dtype, int peer,
               std::uint64_t tag, const CollectiveOptions& options) {
  return startWith(ctx, pointToPointCall(CallKind::kRecv, nullptr, buffer, count, dtype, peer, tag),
                   options);
}

}  // namespace collx
