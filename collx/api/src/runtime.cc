#include "runtime.h"

#include "collx/base/error.h"
#include "collx/base/log.h"

namespace collx::detail {

std::shared_ptr<const algorithms::Schedule> Runtime::schedule(
    const algorithms::AlgorithmInfo& algorithm, const algorithms::ScheduleParams& p) {
  {
    std::lock_guard<std::mutex> lock(cacheMutex_);
    // Calls mostly repeat the one before: no hash for those.
    if (last_ != nullptr && last_->first.algorithm == &algorithm && last_->first.params == p) {
      return last_->second;
    }
    auto it = cache_.find(KeyRef{&algorithm, &p});
    if (it != cache_.end()) {
      last_ = &*it;
      return it->second;
    }
  }
  auto built = std::make_shared<algorithms::Schedule>(algorithm.build(p));
  if (!meshRanks.empty()) built->mapPeers(meshRanks);
  built->finalize();
  COLLX_DEBUG(kAlgo, "rank {}: built {} {} schedule: {} tasks, {} sends, {} bytes out", p.rank,
              algorithms::collectiveName(p.coll), algorithm.name, built->tasks().size(),
              built->sendCount(), built->sendBytes());
  std::lock_guard<std::mutex> lock(cacheMutex_);
  if (cache_.size() >= 512) {  // a bound, not an LRU: workloads repeat few keys
    cache_.clear();
    last_ = nullptr;
  }
  last_ = &*cache_.emplace(Key{&algorithm, p}, built).first;
  return built;
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
  info.notes.record = false;
  info.algorithm = algorithm->name;
  info.key = transport::MessageKey{kAgreementSeq, 0, transport::Space::kCollective};
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

void Runtime::throwOver(Where where) const {
  throw RevokedError(std::move(where),
                     "generation " + std::to_string(generation) +
                         " of this context is over: the "
                         "job went on in generation " +
                         std::to_string(engine->generation()) +
                         " (Context::shrink): use the context that shrink() returned");
}

std::string describeMessage(const transport::MessageKey& key, const transport::Fingerprint& fp) {
  std::string out;
  const char* dtype = "unknown";
  if (fp.dtype <= static_cast<std::uint8_t>(DataType::kFloat64)) {
    dtype = dataTypeName(static_cast<DataType>(fp.dtype));
  }
  if (key.space == transport::Space::kPointToPoint) {
    out = "send/recv tag " + transport::seqText(key.seq);
  } else {
    out = std::string(algorithms::collectiveName(static_cast<algorithms::Collective>(fp.coll))) +
          "#" + transport::seqText(key.seq);
  }
  out += " " + std::string(dtype) + "x" + std::to_string(fp.count);
  if (fp.root >= 0) out += " root " + std::to_string(fp.root);
  return out;
}

}  // namespace collx::detail
