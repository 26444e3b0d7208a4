// Collectives that work on shared memory directly (algorithm "shm"): every rank of the call
// is a member of one SharedGroup (collx/transport/shared_group.h), and data moves through
// the members' group buffers instead of messages between pairs. Blocking, on the calling
// thread; each collective's file under algorithms/src/shared/ says how it goes and what it
// costs.
//
// Reductions run in rank order (r0 op r1 op ... on every element), so results are the same
// bits on every rank and non-commutative ops are exact.
#pragma once

#include "collx/algorithms/engine.h"
#include "collx/algorithms/registry.h"
#include "collx/transport/shared_group.h"

namespace collx::algorithms {

// Runs one call (params as for a schedule: params.rank is the group index, params.size the
// group size; `group` nullptr for a world of one rank). Throws the call's error (a failed
// wait has failed the mesh already).
void runShared(transport::SharedGroup* group, const ScheduleParams& params,
               const Bindings& bindings, const CallInfo& info);

}  // namespace collx::algorithms
