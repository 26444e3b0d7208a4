#include "collx/collectives.h"

#include <algorithm>
#include <string_view>

#include "collx/base/config.h"
#include "collx/base/log.h"
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

struct Call {
  Collective coll;
  const void* input = nullptr;
  void* output = nullptr;
  std::uint64_t count = 0;
  DataType dtype = DataType::kUint8;
  ReduceOp op;
  bool reduces = false;
  int root = -1;
  bool inPlace = false;
  const CollectiveOptions* options = nullptr;
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
};

detail::Runtime& runtimeOf(Context& ctx, const char* what) {
  if (!ctx.runtime()) {
    throw InvalidArgument(Where{ctx.rank(), what, -1}, "the context has no transports");
  }
  return *ctx.runtime();
}

std::chrono::milliseconds timeoutOf(const detail::Runtime& rt, const CollectiveOptions& options,
                                    const Where& where) {
  std::chrono::milliseconds timeout = options.timeout.value_or(rt.timeout);
  if (timeout.count() <= 0) {
    throw InvalidArgument(
        where, "the timeout must be positive, got " + std::to_string(timeout.count()) + " ms");
  }
  return timeout;
}

void checkBuffer(const void* buffer, std::uint64_t count, const char* which, const Where& where) {
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
                                          const CollectiveOptions& callOptions,
                                          const Where& where) {
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

Prepared prepare(Context& ctx, Call& call) {
  const char* what = algorithms::collectiveName(call.coll);
  detail::Runtime& rt = runtimeOf(ctx, what);
  Where where{rt.rank, what, -1};
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
  if (call.reduces) call.op.validate(call.dtype, where);
  Prepared p;  // (one object returned on every path: no copy of it on the way out)
  algorithms::ScheduleParams& params = p.params;
  params.coll = call.coll;
  params.rank = rt.rank;
  params.size = rt.size;
  params.count = call.count;
  params.elementSize = es;
  params.op = call.reduces ? call.op.kind() : ReduceOpKind::kSum;
  params.inPlace = call.inPlace;
  params.root = call.root;
  params.chunkBytes = rt.chunkBytes;
  params.commutative = !call.reduces || call.op.commutative();
  // (The call is this one's: its per-rank vectors move, not copied. alltoallv bruck's counts
  // exchange reads them from the params.)
  params.counts = std::move(call.counts);
  params.displs = std::move(call.displs);
  params.recvCounts = std::move(call.recvCounts);
  params.recvDispls = std::move(call.recvDispls);
  if (rt.hosts > 1) params.hostOf = rt.hostOf;
  const algorithms::Choice choice = algorithms::select(params, rt.policy, call.options->algorithm,
                                                       call.reduces ? &call.op : nullptr);
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
  p.info.collective = what;
  p.info.algorithm = algorithm.name;
  p.info.key = transport::MessageKey{seq, 0, transport::Space::kCollective};
  p.info.fingerprint = transport::Fingerprint{
      static_cast<std::uint8_t>(call.coll), static_cast<std::uint8_t>(call.dtype),
      static_cast<std::uint8_t>(call.reduces ? call.op.kind() : ReduceOpKind::kSum), call.root,
      call.fingerprintCount};
  p.info.dtype = call.dtype;
  p.info.op = call.op;
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

void runBlocking(Context& ctx, Call&& call) {
  Prepared p = prepare(ctx, call);
  if (p.selectOnly) return;
  detail::Runtime& rt = *ctx.runtime();
  if (p.shared) {
    if (rt.engine->runShared(p.params, p.bindings, p.info)) return;
    p.schedule = rt.schedule(*p.shared, p.params);
  }
  rt.engine->run(std::move(p.schedule), p.bindings, std::move(p.info));
}

Work runAsync(Context& ctx, Call&& call) {
  Prepared p = prepare(ctx, call);
  if (p.selectOnly) return Work{};
  if (p.shared) p.schedule = ctx.runtime()->schedule(*p.shared, p.params);
  auto execution =
      ctx.runtime()->engine->start(std::move(p.schedule), p.bindings, std::move(p.info));
  return WorkAccess::make(ctx.runtime(), std::move(execution));
}

Call allreduceCall(Context& ctx, const void* sendbuf, void* recvbuf, std::uint64_t count,
                   DataType dtype, const AllreduceOptions& options) {
  Where where{ctx.rank(), "allreduce", -1};
  checkBuffer(sendbuf, count, "sendbuf", where);
  checkBuffer(recvbuf, count, "recvbuf", where);
  Call c;
  c.coll = Collective::kAllreduce;
  c.input = sendbuf;
  c.output = recvbuf;
  c.count = count;
  c.dtype = dtype;
  c.op = options.op;
  c.reduces = true;
  c.inPlace = sendbuf == recvbuf;
  c.options = &options;
  c.fingerprintCount = count;
  return c;
}

Call allgatherCall(Context& ctx, const void* sendbuf, void* recvbuf, std::uint64_t count,
                   DataType dtype, const CollectiveOptions& options) {
  Where where{ctx.rank(), "allgather", -1};
  checkBuffer(recvbuf, count, "recvbuf", where);
  const auto* own = static_cast<const std::uint8_t*>(recvbuf) +
                    count * dataTypeSize(dtype) * static_cast<std::uint64_t>(ctx.rank());
  Call c;
  c.coll = Collective::kAllgather;
  c.inPlace = sendbuf == nullptr || sendbuf == own;
  c.input = c.inPlace ? own : sendbuf;
  c.output = recvbuf;
  c.count = count;
  c.dtype = dtype;
  c.options = &options;
  c.fingerprintCount = count;
  return c;
}

Call broadcastCall(Context& ctx, void* buffer, std::uint64_t count, DataType dtype, int root,
                   const CollectiveOptions& options) {
  Where where{ctx.rank(), "broadcast", -1};
  checkBuffer(buffer, count, "buffer", where);
  if (root < 0 || root >= ctx.size()) {
    throw InvalidArgument(where, "root " + std::to_string(root) + " is outside [0, " +
                                     std::to_string(ctx.size()) + ")");
  }
  Call c;
  c.coll = Collective::kBroadcast;
  c.input = buffer;
  c.output = buffer;
  c.count = count;
  c.dtype = dtype;
  c.root = root;
  c.inPlace = true;
  c.options = &options;
  c.fingerprintCount = count;
  return c;
}

Call barrierCall(const CollectiveOptions& options) {
  Call c;
  c.coll = Collective::kBarrier;
  c.options = &options;
  return c;
}

void checkRoot(int root, int size, const Where& where) {
  if (root < 0 || root >= size) {
    throw InvalidArgument(
        where, "root " + std::to_string(root) + " is outside [0, " + std::to_string(size) + ")");
  }
}

// Per-rank counts and displacements: one per rank, blocks that do not overlap.
void checkLayout(const Counts& counts, const Counts* displs, int size, const char* what,
                 const Where& where) {
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

Call allgathervCall(Context& ctx, const void* sendbuf, std::uint64_t sendcount, void* recvbuf,
                    const Counts& recvcounts, const Counts& displs, DataType dtype,
                    const CollectiveOptions& options) {
  Where where{ctx.rank(), "allgatherv", -1};
  checkLayout(recvcounts, &displs, ctx.size(), "recvcounts", where);
  if (sendcount != recvcounts[ctx.rank()]) {
    throw InvalidArgument(where, "sendcount " + std::to_string(sendcount) +
                                     " differs from recvcounts[" + std::to_string(ctx.rank()) +
                                     "] = " + std::to_string(recvcounts[ctx.rank()]));
  }
  checkBuffer(recvbuf, total(recvcounts), "recvbuf", where);
  const auto* own =
      static_cast<const std::uint8_t*>(recvbuf) + displs[ctx.rank()] * dataTypeSize(dtype);
  Call c;
  c.coll = Collective::kAllgatherv;
  c.inPlace = sendbuf == nullptr || sendbuf == own;
  if (!c.inPlace) checkBuffer(sendbuf, sendcount, "sendbuf", where);
  c.input = c.inPlace ? own : sendbuf;
  c.output = recvbuf;
  c.count = sendcount;
  c.dtype = dtype;
  c.counts = recvcounts;
  c.displs = displs;
  c.options = &options;
  c.fingerprintCount = total(recvcounts);
  return c;
}

Call reduceScatterCall(Context& ctx, const void* sendbuf, void* recvbuf, const Counts& recvcounts,
                       DataType dtype, const ReduceOptions& options) {
  Where where{ctx.rank(), "reduce_scatter", -1};
  checkLayout(recvcounts, nullptr, ctx.size(), "recvcounts", where);
  checkBuffer(sendbuf, total(recvcounts), "sendbuf", where);
  checkBuffer(recvbuf, recvcounts[ctx.rank()], "recvbuf", where);
  if (sendbuf == recvbuf && total(recvcounts) > 0) {
    throw InvalidArgument(where,
                          "sendbuf and recvbuf are the same buffer: reduce_scatter "
                          "works out of place");
  }
  Call c;
  c.coll = Collective::kReduceScatter;
  c.input = sendbuf;
  c.output = recvbuf;
  c.count = recvcounts[ctx.rank()];
  c.dtype = dtype;
  c.op = options.op;
  c.reduces = true;
  c.counts = recvcounts;
  c.displs = prefixSums(recvcounts);
  c.options = &options;
  c.fingerprintCount = total(recvcounts);
  return c;
}

Call reduceCall(Context& ctx, const void* sendbuf, void* recvbuf, std::uint64_t count,
                DataType dtype, int root, const ReduceOptions& options) {
  Where where{ctx.rank(), "reduce", -1};
  checkRoot(root, ctx.size(), where);
  checkBuffer(sendbuf, count, "sendbuf", where);
  if (ctx.rank() == root) checkBuffer(recvbuf, count, "recvbuf", where);
  Call c;
  c.coll = Collective::kReduce;
  c.input = sendbuf;
  c.output = recvbuf;
  c.count = count;
  c.dtype = dtype;
  c.op = options.op;
  c.reduces = true;
  c.root = root;
  c.inPlace = ctx.rank() == root && sendbuf == recvbuf;
  c.options = &options;
  c.fingerprintCount = count;
  return c;
}

Call gatherCall(Context& ctx, Collective coll, const void* sendbuf, std::uint64_t sendcount,
                void* recvbuf, const Counts& recvcounts, const Counts& displs, DataType dtype,
                int root, const CollectiveOptions& options) {
  const char* what = algorithms::collectiveName(coll);
  Where where{ctx.rank(), what, -1};
  checkRoot(root, ctx.size(), where);
  const bool isRoot = ctx.rank() == root;
  const std::size_t es = dataTypeSize(dtype);
  Call c;
  c.coll = coll;
  c.root = root;
  c.dtype = dtype;
  c.count = sendcount;
  c.options = &options;
  c.output = recvbuf;
  c.input = sendbuf;
  if (isRoot) {
    checkLayout(recvcounts, &displs, ctx.size(), "recvcounts", where);
    checkBuffer(recvbuf, total(recvcounts), "recvbuf", where);
    if (sendbuf == nullptr) {  // in place: the root's block is already in recvbuf
      c.inPlace = true;
      c.input = static_cast<const std::uint8_t*>(recvbuf) + displs[root] * es;
      c.count = recvcounts[root];
    } else if (sendcount != recvcounts[root]) {
      throw InvalidArgument(where, "sendcount " + std::to_string(sendcount) +
                                       " differs from recvcounts[" + std::to_string(root) +
                                       "] = " + std::to_string(recvcounts[root]));
    }
    c.counts = recvcounts;
    c.displs = displs;
  } else if (static_cast<int>(recvcounts.size()) == ctx.size()) {
    c.counts = recvcounts;  // the binomial algorithm forwards its subtree's blocks
  }
  if (!c.inPlace) checkBuffer(sendbuf, c.count, "sendbuf", where);
  c.fingerprintCount = coll == Collective::kGather ? sendcount : 0;
  return c;
}

Call scatterCall(Context& ctx, Collective coll, const void* sendbuf, const Counts& sendcounts,
                 const Counts& displs, void* recvbuf, std::uint64_t recvcount, DataType dtype,
                 int root, const CollectiveOptions& options) {
  const char* what = algorithms::collectiveName(coll);
  Where where{ctx.rank(), what, -1};
  checkRoot(root, ctx.size(), where);
  const bool isRoot = ctx.rank() == root;
  const std::size_t es = dataTypeSize(dtype);
  Call c;
  c.coll = coll;
  c.root = root;
  c.dtype = dtype;
  c.count = recvcount;
  c.options = &options;
  c.input = sendbuf;
  c.output = recvbuf;
  if (isRoot) {
    checkLayout(sendcounts, &displs, ctx.size(), "sendcounts", where);
    checkBuffer(sendbuf, total(sendcounts), "sendbuf", where);
    if (recvbuf == nullptr) {  // in place: the root's block stays in sendbuf
      c.inPlace = true;
      c.output =
          const_cast<std::uint8_t*>(static_cast<const std::uint8_t*>(sendbuf)) + displs[root] * es;
      c.count = sendcounts[root];
    } else if (recvcount != sendcounts[root]) {
      throw InvalidArgument(where, "recvcount " + std::to_string(recvcount) +
                                       " differs from sendcounts[" + std::to_string(root) +
                                       "] = " + std::to_string(sendcounts[root]));
    }
    c.counts = sendcounts;
    c.displs = displs;
  } else if (static_cast<int>(sendcounts.size()) == ctx.size()) {
    c.counts = sendcounts;  // the binomial algorithm forwards its subtree's blocks
  }
  if (!c.inPlace) checkBuffer(recvbuf, c.count, "recvbuf", where);
  c.fingerprintCount = coll == Collective::kScatter ? recvcount : 0;
  return c;
}

Call alltoallCall(Context& ctx, Collective coll, const void* sendbuf, const Counts& sendcounts,
                  const Counts& sdispls, void* recvbuf, const Counts& recvcounts,
                  const Counts& rdispls, DataType dtype, const CollectiveOptions& options,
                  std::uint64_t count) {
  const char* what = algorithms::collectiveName(coll);
  Where where{ctx.rank(), what, -1};
  checkLayout(sendcounts, &sdispls, ctx.size(), "sendcounts", where);
  checkLayout(recvcounts, &rdispls, ctx.size(), "recvcounts", where);
  checkBuffer(sendbuf, total(sendcounts), "sendbuf", where);
  checkBuffer(recvbuf, total(recvcounts), "recvbuf", where);
  if (sendbuf == recvbuf && total(sendcounts) > 0) {
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
  Call c;
  c.coll = coll;
  c.input = sendbuf;
  c.output = recvbuf;
  c.count = count;
  c.dtype = dtype;
  c.counts = sendcounts;
  c.displs = sdispls;
  c.recvCounts = recvcounts;
  c.recvDispls = rdispls;
  c.options = &options;
  c.fingerprintCount = coll == Collective::kAlltoall ? count : 0;
  return c;
}

Counts uniform(int size, std::uint64_t count) {
  return Counts(static_cast<std::size_t>(size), count);
}

Counts uniformDispls(int size, std::uint64_t count) {
  Counts out(static_cast<std::size_t>(size));
  for (int i = 0; i < size; ++i) out[i] = static_cast<std::uint64_t>(i) * count;
  return out;
}

// Point to point: one transfer, its key the user's tag.
Prepared prepareP2P(Context& ctx, bool sending, const void* buffer, std::uint64_t count,
                    DataType dtype, int peer, std::uint64_t tag, const CollectiveOptions& options) {
  const char* what = sending ? "send" : "recv";
  detail::Runtime& rt = runtimeOf(ctx, what);
  Where where{rt.rank, what, peer};
  checkBuffer(buffer, count, "buffer", where);
  if (peer < 0 || peer >= rt.size) {
    throw InvalidArgument(
        where, "peer " + std::to_string(peer) + " is outside [0, " + std::to_string(rt.size) + ")");
  }
  const std::uint64_t bytes = count * dataTypeSize(dtype);
  auto schedule = std::make_shared<algorithms::Schedule>(sending ? "send" : "recv");
  if (sending) {
    schedule->send(peer, 0, algorithms::input(), bytes);
  } else {
    schedule->recv(peer, 0, algorithms::output(), bytes);
  }
  schedule->finalize();
  Prepared p;
  p.schedule = std::move(schedule);
  p.bindings.input = buffer;
  p.bindings.output = const_cast<void*>(buffer);
  p.info.collective = what;
  p.info.peer = peer;
  p.info.key = transport::MessageKey{tag, 0, transport::Space::kPointToPoint};
  p.info.fingerprint = transport::Fingerprint{static_cast<std::uint8_t>(Collective::kSendRecv),
                                              static_cast<std::uint8_t>(dtype), 0, -1, count};
  p.info.dtype = dtype;
  p.info.timeout = timeoutOf(rt, options, where);
  p.info.deadline = algorithms::Clock::now() + p.info.timeout;
  return p;
}

}  // namespace

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

void allreduce(Context& ctx, const void* sendbuf, void* recvbuf, std::uint64_t count,
               DataType dtype, const AllreduceOptions& options) {
  runBlocking(ctx, allreduceCall(ctx, sendbuf, recvbuf, count, dtype, options));
}

Work allreduceAsync(Context& ctx, const void* sendbuf, void* recvbuf, std::uint64_t count,
                    DataType dtype, const AllreduceOptions& options) {
  return runAsync(ctx, allreduceCall(ctx, sendbuf, recvbuf, count, dtype, options));
}

void allgather(Context& ctx, const void* sendbuf, void* recvbuf, std::uint64_t count,
               DataType dtype, const CollectiveOptions& options) {
  runBlocking(ctx, allgatherCall(ctx, sendbuf, recvbuf, count, dtype, options));
}

Work allgatherAsync(Context& ctx, const void* sendbuf, void* recvbuf, std::uint64_t count,
                    DataType dtype, const CollectiveOptions& options) {
  return runAsync(ctx, allgatherCall(ctx, sendbuf, recvbuf, count, dtype, options));
}

void broadcast(Context& ctx, void* buffer, std::uint64_t count, DataType dtype, int root,
               const CollectiveOptions& options) {
  runBlocking(ctx, broadcastCall(ctx, buffer, count, dtype, root, options));
}

Work broadcastAsync(Context& ctx, void* buffer, std::uint64_t count, DataType dtype, int root,
                    const CollectiveOptions& options) {
  return runAsync(ctx, broadcastCall(ctx, buffer, count, dtype, root, options));
}

void barrier(Context& ctx, const CollectiveOptions& options) {
  runBlocking(ctx, barrierCall(options));
}

Work barrierAsync(Context& ctx, const CollectiveOptions& options) {
  return runAsync(ctx, barrierCall(options));
}

void send(Context& ctx, const void* buffer, std::uint64_t count, DataType dtype, int peer,
          std::uint64_t tag, const CollectiveOptions& options) {
  Prepared p = prepareP2P(ctx, true, buffer, count, dtype, peer, tag, options);
  ctx.runtime()->engine->run(std::move(p.schedule), p.bindings, std::move(p.info));
}

void recv(Context& ctx, void* buffer, std::uint64_t count, DataType dtype, int peer,
          std::uint64_t tag, const CollectiveOptions& options) {
  Prepared p = prepareP2P(ctx, false, buffer, count, dtype, peer, tag, options);
  ctx.runtime()->engine->run(std::move(p.schedule), p.bindings, std::move(p.info));
}

Work sendAsync(Context& ctx, const void* buffer, std::uint64_t count, DataType dtype, int peer,
               std::uint64_t tag, const CollectiveOptions& options) {
  Prepared p = prepareP2P(ctx, true, buffer, count, dtype, peer, tag, options);
  auto e = ctx.runtime()->engine->start(std::move(p.schedule), p.bindings, std::move(p.info));
  return WorkAccess::make(ctx.runtime(), std::move(e));
}

Work recvAsync(Context& ctx, void* buffer, std::uint64_t count, DataType dtype, int peer,
               std::uint64_t tag, const CollectiveOptions& options) {
  Prepared p = prepareP2P(ctx, false, buffer, count, dtype, peer, tag, options);
  auto e = ctx.runtime()->engine->start(std::move(p.schedule), p.bindings, std::move(p.info));
  return WorkAccess::make(ctx.runtime(), std::move(e));
}

}  // namespace collx

namespace collx {

void allgatherv(Context& ctx, const void* sendbuf, std::uint64_t sendcount, void* recvbuf,
                const Counts& recvcounts, const Counts& displs, DataType dtype,
                const CollectiveOptions& options) {
  runBlocking(ctx,
              allgathervCall(ctx, sendbuf, sendcount, recvbuf, recvcounts, displs, dtype, options));
}
Work allgathervAsync(Context& ctx, const void* sendbuf, std::uint64_t sendcount, void* recvbuf,
                     const Counts& recvcounts, const Counts& displs, DataType dtype,
                     const CollectiveOptions& options) {
  return runAsync(
      ctx, allgathervCall(ctx, sendbuf, sendcount, recvbuf, recvcounts, displs, dtype, options));
}

void reduceScatter(Context& ctx, const void* sendbuf, void* recvbuf, std::uint64_t recvcount,
                   DataType dtype, const ReduceOptions& options) {
  runBlocking(ctx, reduceScatterCall(ctx, sendbuf, recvbuf, uniform(ctx.size(), recvcount), dtype,
                                     options));
}
Work reduceScatterAsync(Context& ctx, const void* sendbuf, void* recvbuf, std::uint64_t recvcount,
                        DataType dtype, const ReduceOptions& options) {
  return runAsync(ctx, reduceScatterCall(ctx, sendbuf, recvbuf, uniform(ctx.size(), recvcount),
                                         dtype, options));
}
void reduceScatterv(Context& ctx, const void* sendbuf, void* recvbuf, const Counts& recvcounts,
                    DataType dtype, const ReduceOptions& options) {
  runBlocking(ctx, reduceScatterCall(ctx, sendbuf, recvbuf, recvcounts, dtype, options));
}
Work reduceScattervAsync(Context& ctx, const void* sendbuf, void* recvbuf, const Counts& recvcounts,
                         DataType dtype, const ReduceOptions& options) {
  return runAsync(ctx, reduceScatterCall(ctx, sendbuf, recvbuf, recvcounts, dtype, options));
}

void reduce(Context& ctx, const void* sendbuf, void* recvbuf, std::uint64_t count, DataType dtype,
            int root, const ReduceOptions& options) {
  runBlocking(ctx, reduceCall(ctx, sendbuf, recvbuf, count, dtype, root, options));
}
Work reduceAsync(Context& ctx, const void* sendbuf, void* recvbuf, std::uint64_t count,
                 DataType dtype, int root, const ReduceOptions& options) {
  return runAsync(ctx, reduceCall(ctx, sendbuf, recvbuf, count, dtype, root, options));
}

void gather(Context& ctx, const void* sendbuf, void* recvbuf, std::uint64_t count, DataType dtype,
            int root, const CollectiveOptions& options) {
  runBlocking(
      ctx, gatherCall(ctx, Collective::kGather, sendbuf, count, recvbuf, uniform(ctx.size(), count),
                      uniformDispls(ctx.size(), count), dtype, root, options));
}
Work gatherAsync(Context& ctx, const void* sendbuf, void* recvbuf, std::uint64_t count,
                 DataType dtype, int root, const CollectiveOptions& options) {
  return runAsync(
      ctx, gatherCall(ctx, Collective::kGather, sendbuf, count, recvbuf, uniform(ctx.size(), count),
                      uniformDispls(ctx.size(), count), dtype, root, options));
}
void gatherv(Context& ctx, const void* sendbuf, std::uint64_t sendcount, void* recvbuf,
             const Counts& recvcounts, const Counts& displs, DataType dtype, int root,
             const CollectiveOptions& options) {
  runBlocking(ctx, gatherCall(ctx, Collective::kGatherv, sendbuf, sendcount, recvbuf, recvcounts,
                              displs, dtype, root, options));
}
Work gathervAsync(Context& ctx, const void* sendbuf, std::uint64_t sendcount, void* recvbuf,
                  const Counts& recvcounts, const Counts& displs, DataType dtype, int root,
                  const CollectiveOptions& options) {
  return runAsync(ctx, gatherCall(ctx, Collective::kGatherv, sendbuf, sendcount, recvbuf,
                                  recvcounts, displs, dtype, root, options));
}

void scatter(Context& ctx, const void* sendbuf, void* recvbuf, std::uint64_t count, DataType dtype,
             int root, const CollectiveOptions& options) {
  runBlocking(ctx,
              scatterCall(ctx, Collective::kScatter, sendbuf, uniform(ctx.size(), count),
                          uniformDispls(ctx.size(), count), recvbuf, count, dtype, root, options));
}
Work scatterAsync(Context& ctx, const void* sendbuf, void* recvbuf, std::uint64_t count,
                  DataType dtype, int root, const CollectiveOptions& options) {
  return runAsync(
      ctx, scatterCall(ctx, Collective::kScatter, sendbuf, uniform(ctx.size(), count),
                       uniformDispls(ctx.size(), count), recvbuf, count, dtype, root, options));
}
void scatterv(Context& ctx, const void* sendbuf, const Counts& sendcounts, const Counts& displs,
              void* recvbuf, std::uint64_t recvcount, DataType dtype, int root,
              const CollectiveOptions& options) {
  runBlocking(ctx, scatterCall(ctx, Collective::kScatterv, sendbuf, sendcounts, displs, recvbuf,
                               recvcount, dtype, root, options));
}
Work scattervAsync(Context& ctx, const void* sendbuf, const Counts& sendcounts,
                   const Counts& displs, void* recvbuf, std::uint64_t recvcount, DataType dtype,
                   int root, const CollectiveOptions& options) {
  return runAsync(ctx, scatterCall(ctx, Collective::kScatterv, sendbuf, sendcounts, displs, recvbuf,
                                   recvcount, dtype, root, options));
}

void alltoall(Context& ctx, const void* sendbuf, void* recvbuf, std::uint64_t count, DataType dtype,
              const CollectiveOptions& options) {
  Counts c = uniform(ctx.size(), count), d = uniformDispls(ctx.size(), count);
  runBlocking(ctx, alltoallCall(ctx, Collective::kAlltoall, sendbuf, c, d, recvbuf, c, d, dtype,
                                options, count));
}
Work alltoallAsync(Context& ctx, const void* sendbuf, void* recvbuf, std::uint64_t count,
                   DataType dtype, const CollectiveOptions& options) {
  Counts c = uniform(ctx.size(), count), d = uniformDispls(ctx.size(), count);
  return runAsync(ctx, alltoallCall(ctx, Collective::kAlltoall, sendbuf, c, d, recvbuf, c, d, dtype,
                                    options, count));
}
void alltoallv(Context& ctx, const void* sendbuf, const Counts& sendcounts, const Counts& sdispls,
               void* recvbuf, const Counts& recvcounts, const Counts& rdispls, DataType dtype,
               const CollectiveOptions& options) {
  runBlocking(ctx, alltoallCall(ctx, Collective::kAlltoallv, sendbuf, sendcounts, sdispls, recvbuf,
                                recvcounts, rdispls, dtype, options, 0));
}
Work alltoallvAsync(Context& ctx, const void* sendbuf, const Counts& sendcounts,
                    const Counts& sdispls, void* recvbuf, const Counts& recvcounts,
                    const Counts& rdispls, DataType dtype, const CollectiveOptions& options) {
  return runAsync(ctx, alltoallCall(ctx, Collective::kAlltoallv, sendbuf, sendcounts, sdispls,
                                    recvbuf, recvcounts, rdispls, dtype, options, 0));
}

}  // namespace collx
