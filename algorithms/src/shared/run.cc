#include "collx/algorithms/shared.h"

#include "collx/base/error.h"
#include "shared.h"

namespace collx::algorithms {

void runShared(transport::SharedGroup& group, const ScheduleParams& params,
               const Bindings& bindings, const CallInfo& info) {
  shared::Call call(group, params, bindings, info);
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
      throw Unsupported(Where{info.key.seq == 0 ? -1 : params.rank, callName(info), -1},
                        std::string("no shared-memory algorithm for ") +
                            collectiveName(params.coll));
  }
}

}  // namespace collx::algorithms
