#include "collx/collectives.h"

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
};

struct Prepared {
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
    throw InvalidArgument(where, "the timeout must be positive, got " +
                                     std::to_string(timeout.count()) + " ms");
  }
  return timeout;
}

void checkBuffer(const void* buffer, std::uint64_t count, const char* which, const Where& where) {
  if (buffer == nullptr && count > 0) {
    throw InvalidArgument(where, std::string(which) + " is null with a count of " +
                                     std::to_string(count));
  }
}

const algorithms::AlgorithmInfo& choose(const detail::Runtime& rt, const Call& call,
                                        std::uint64_t bytes, const Where& where) {
  std::string name = call.options->algorithm;
  std::string source = "options";
  if (name.empty()) {
    auto it = rt.configuredAlgorithm.find(call.coll);
    if (it != rt.configuredAlgorithm.end()) {
      name = it->second;
      source = std::string("COLLX_") + algorithms::collectiveName(call.coll) + "_ALGO";
      for (char& c : source) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    }
  }
  if (name.empty()) {
    name = algorithms::defaultAlgorithm(call.coll, rt.size, bytes);
    source = "default table";
  }
  const algorithms::AlgorithmInfo* info = algorithms::findAlgorithm(call.coll, name);
  if (info == nullptr) {
    throw InvalidArgument(where, "unknown " + std::string(algorithms::collectiveName(call.coll)) +
                                     " algorithm '" + name + "' (from " + source + "; valid: " +
                                     algorithms::algorithmNames(call.coll) + ")");
  }
  COLLX_DEBUG(kAlgo, "rank {}: {} of {} bytes over {} ranks: {} (from {})", rt.rank,
              algorithms::collectiveName(call.coll), bytes, rt.size, info->name, source);
  return *info;
}

Prepared prepare(Context& ctx, const Call& call) {
  const char* what = algorithms::collectiveName(call.coll);
  detail::Runtime& rt = runtimeOf(ctx, what);
  Where where{rt.rank, what, -1};
  const std::size_t es = dataTypeSize(call.dtype);
  if (es == 0) throw InvalidArgument(where, "unknown data type");
  if (call.count > (~std::uint64_t{0} >> 1) / es / static_cast<std::uint64_t>(rt.size)) {
    throw InvalidArgument(where, "count " + std::to_string(call.count) + " is too large");
  }
  if (call.root != -1 && (call.root < 0 || call.root >= rt.size)) {
    throw InvalidArgument(where, "root " + std::to_string(call.root) + " is outside [0, " +
                                     std::to_string(rt.size) + ")");
  }
  if (call.reduces) {
    call.op.validate(call.dtype, where);
    if (call.op.kind() == ReduceOpKind::kCustom && !call.op.commutative()) {
      throw InvalidArgument(where, "reduce op '" + call.op.name() +
                                       "' is not commutative, and no allreduce algorithm of this "
                                       "build keeps rank order");
    }
  }
  algorithms::ScheduleParams params;
  params.coll = call.coll;
  params.rank = rt.rank;
  params.size = rt.size;
  params.count = call.count;
  params.elementSize = es;
  params.op = call.reduces ? call.op.kind() : ReduceOpKind::kSum;
  params.inPlace = call.inPlace;
  params.root = call.root;
  params.chunkBytes = rt.chunkBytes;
  const auto& algorithm = choose(rt, call, call.count * es, where);
  Prepared p;
  p.schedule = rt.schedule(algorithm, params);
  p.bindings.input = call.input;
  p.bindings.output = call.output;
  const std::uint64_t seq = rt.sequence.fetch_add(1);
  p.info.collective = what;
  p.info.algorithm = algorithm.name;
  p.info.key = transport::MessageKey{seq, 0, transport::Space::kCollective};
  p.info.fingerprint = transport::Fingerprint{
      static_cast<std::uint8_t>(call.coll), static_cast<std::uint8_t>(call.dtype),
      static_cast<std::uint8_t>(call.reduces ? call.op.kind() : ReduceOpKind::kSum), call.root,
      call.count};
  p.info.dtype = call.dtype;
  p.info.op = call.op;
  p.info.timeout = timeoutOf(rt, *call.options, where);
  p.info.deadline = algorithms::Clock::now() + p.info.timeout;
  return p;
}

void runBlocking(Context& ctx, const Call& call) {
  Prepared p = prepare(ctx, call);
  ctx.runtime()->engine->run(std::move(p.schedule), p.bindings, std::move(p.info));
}

Work runAsync(Context& ctx, const Call& call) {
  Prepared p = prepare(ctx, call);
  auto execution = ctx.runtime()->engine->start(std::move(p.schedule), p.bindings, std::move(p.info));
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
  return c;
}

Call barrierCall(const CollectiveOptions& options) {
  Call c;
  c.coll = Collective::kBarrier;
  c.options = &options;
  return c;
}

// Point to point: one transfer, its key the user's tag.
Prepared prepareP2P(Context& ctx, bool sending, const void* buffer, std::uint64_t count,
                    DataType dtype, int peer, std::uint64_t tag,
                    const CollectiveOptions& options) {
  const char* what = sending ? "send" : "recv";
  detail::Runtime& rt = runtimeOf(ctx, what);
  Where where{rt.rank, what, peer};
  checkBuffer(buffer, count, "buffer", where);
  if (peer < 0 || peer >= rt.size) {
    throw InvalidArgument(where, "peer " + std::to_string(peer) + " is outside [0, " +
                                     std::to_string(rt.size) + ")");
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
  if (!execution_) throw InvalidArgument(Where{-1, "Work::wait", -1}, "an empty Work");
  std::optional<algorithms::Clock::time_point> until;
  if (timeout) until = algorithms::Clock::now() + *timeout;
  return runtime_->engine->wait(*execution_, until);
}

std::exception_ptr Work::error() const {
  return execution_ ? algorithms::Engine::errorOf(*execution_) : nullptr;
}

bool Work::test() {
  if (!execution_) throw InvalidArgument(Where{-1, "Work::test", -1}, "an empty Work");
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
