#include "runtime.h"

#include "collx/base/error.h"
#include "collx/base/log.h"

namespace collx::detail {

std::shared_ptr<const algorithms::Schedule> Runtime::schedule(
    const algorithms::AlgorithmInfo& algorithm, const algorithms::ScheduleParams& p) {
  Key key{&algorithm, p};
  {
    std::lock_guard<std::mutex> lock(cacheMutex_);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
  }
  auto built = std::make_shared<algorithms::Schedule>(algorithm.build(p));
  built->finalize();
  COLLX_DEBUG(kAlgo, "rank {}: built {} {} schedule: {} tasks, {} sends, {} bytes out", p.rank,
              algorithms::collectiveName(p.coll), algorithm.name, built->tasks().size(),
              built->sendCount(), built->sendBytes());
  std::lock_guard<std::mutex> lock(cacheMutex_);
  if (cache_.size() >= 512) cache_.clear();  // a bound, not an LRU: workloads repeat few keys
  cache_.emplace(key, built);
  return built;
}

Runtime::~Runtime() {
  if (engine && sharedWorker.busy()) engine->abort("the context was destroyed");
}

std::uint8_t everyRank(Runtime& rt, std::uint8_t mine) {
  algorithms::ScheduleParams params;
  params.coll = algorithms::Collective::kAllreduce;
  params.rank = rt.rank;
  params.size = rt.size;
  params.count = 1;
  params.elementSize = 1;
  params.op = ReduceOpKind::kBand;
  params.inPlace = true;
  params.chunkBytes = rt.chunkBytes;
  const auto* algorithm =
      algorithms::findAlgorithm(algorithms::Collective::kAllreduce, "recursive_doubling");
  std::uint8_t value = mine;
  algorithms::CallInfo info;
  info.collective = "connect";
  info.algorithm = algorithm->name;
  // Outside the sequence numbers of collectives (which start at 0).
  info.key = transport::MessageKey{~std::uint64_t{0}, 0, transport::Space::kCollective};
  info.fingerprint = transport::Fingerprint{static_cast<std::uint8_t>(params.coll),
                                            static_cast<std::uint8_t>(DataType::kUint8),
                                            static_cast<std::uint8_t>(ReduceOpKind::kBand), -1, 1};
  info.dtype = DataType::kUint8;
  info.op = ReduceOp(ReduceOpKind::kBand);
  info.timeout = rt.timeout;
  info.deadline = algorithms::Clock::now() + rt.timeout;
  rt.engine->run(rt.schedule(*algorithm, params), algorithms::Bindings{&value, &value}, info);
  return value;
}

bool SharedJob::wait(std::optional<std::chrono::steady_clock::time_point> until) {
  std::unique_lock<std::mutex> lock(mutex);
  if (until) {
    if (!ended.wait_until(lock, *until, [&] { return done; })) return false;
  } else {
    ended.wait(lock, [&] { return done; });
  }
  if (error) std::rethrow_exception(error);
  return true;
}

SharedWorker::~SharedWorker() {
  std::deque<std::shared_ptr<SharedJob>> left;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    left.swap(queue_);
  }
  changed_.notify_all();
  for (auto& job : left) {
    std::lock_guard<std::mutex> lock(job->mutex);
    job->error = std::make_exception_ptr(
        Aborted(job->where, "the context was destroyed before the call started"));
    job->done = true;
    job->ended.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

void SharedWorker::submit(std::shared_ptr<SharedJob> job) {
  std::lock_guard<std::mutex> lock(mutex_);
  outstanding_.fetch_add(1, std::memory_order_acq_rel);
  queue_.push_back(std::move(job));
  if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
  changed_.notify_all();
}

void SharedWorker::drain() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return !running_ && queue_.empty(); });
}

void SharedWorker::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping
    std::shared_ptr<SharedJob> job = std::move(queue_.front());
    queue_.pop_front();
    running_ = true;
    lock.unlock();
    std::exception_ptr error;
    try {
      job->run();
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> jobLock(job->mutex);
      job->error = error;
      job->done = true;
    }
    job->ended.notify_all();
    lock.lock();
    running_ = false;
    outstanding_.fetch_sub(1, std::memory_order_acq_rel);
    changed_.notify_all();
  }
}

std::string describeMessage(const transport::MessageKey& key, const transport::Fingerprint& fp) {
  std::string out;
  const char* dtype = "unknown";
  if (fp.dtype <= static_cast<std::uint8_t>(DataType::kFloat64)) {
    dtype = dataTypeName(static_cast<DataType>(fp.dtype));
  }
  if (key.space == transport::Space::kPointToPoint) {
    out = "send/recv tag " + std::to_string(key.seq);
  } else {
    out = std::string(algorithms::collectiveName(static_cast<algorithms::Collective>(fp.coll))) +
          "#" + std::to_string(key.seq);
  }
  out += " " + std::string(dtype) + "x" + std::to_string(fp.count);
  if (fp.root >= 0) out += " root " + std::to_string(fp.root);
  return out;
}

}  // namespace collx::detail
