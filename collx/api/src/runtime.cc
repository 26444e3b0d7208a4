#include "runtime.h"

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
