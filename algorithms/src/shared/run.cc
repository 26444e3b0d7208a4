#include <cstring>

#include "collx/algorithms/shared.h"
#include "collx/base/error.h"
#include "shared.h"

namespace collx::algorithms {

namespace {

// A world of one: the result is this rank's own data.
void runAlone(const ScheduleParams& p, const Bindings& b) {
  const auto* in = static_cast<const std::uint8_t*>(b.input);
  auto* out = static_cast<std::uint8_t*>(b.output);
  std::uint64_t bytes = p.count * p.elementSize;
  if (p.coll == Collective::kReduceScatter)
    in += p.displs.empty() ? 0 : p.displs[0] * p.elementSize;
  if (p.coll == Collective::kBarrier || p.coll == Collective::kBroadcast) bytes = 0;
  if (bytes > 0 && in != out) std::memmove(out, in, bytes);
}

}  // namespace

void runShared(transport::SharedGroup* group, const ScheduleParams& params,
               const Bindings& bindings, const CallInfo& info) {
  if (group == nullptr) return runAlone(params, bindings);
  // Nothing to move: like the schedules, nothing to wait for either (but a barrier).
  if (params.coll != Collective::kBarrier && params.count == 0 &&
      (params.coll != Collective::kReduceScatter || params.displs.empty() ||
       params.displs.back() + params.counts.back() == 0)) {
    return;
  }
  shared::Call call(*group, params, bindings, info);
  switch (params.coll) {
    case Collective::kBarrier:
      return shared::barrier(call);
    case Collective::kAllreduce:
      return shared::allreduce(call);
    case Collective::kBroadcast:
      return shared::broadcast(call);
    case Collective::kAllgather:
      return shared::allgather(call);
    case Collective::kReduceScatter:
      return shared::reduceScatter(call);
    default:
      throw Unsupported(
          Where{info.key.seq == 0 ? -1 : params.rank, callName(info), -1},
          std::string("no shared-memory algorithm for ") + collectiveName(params.coll));
  }
}

}  // namespace collx::algorithms
