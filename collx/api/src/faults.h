// Fault injection for the recovery's tests and trials (COLLX_FAULT): a process kills,
// stops or slows itself at a chosen point of revoke, agree, shrink, grow, reform or join,
// or at a chosen step of a collective.
#pragma once

#include <cstdint>
#include <functional>

#include "collx/algorithms/call.h"

namespace collx::detail {

// The points: "revoke", "agree.entered" (its entry is in the store), "agree.decided" (it read
// the answer), "regroup.planned" (the members of shrink, grow or reform are known),
// "regroup.reformed" (the old generation ended here), "regroup.met" (the members and the
// newcomers published their addresses), "regroup.connected" (the newcomers' connections
// are made), "join.ticket" (a newcomer took its ticket), "join.connected" (a
// newcomer's connections are made). Does what COLLX_FAULT says for `point` on `rank` (the
// context's rank there; -1 for a newcomer before it has one), else nothing.
void faultAt(const char* point, int rank);

// The engine's hook (EngineOptions::onStep) for COLLX_FAULT's collective steps, or an empty
// one when it names none. A step's point is "COLL.stepS" (the first call of collective COLL,
// or of any with "any", to post a transfer of step S; a shared-memory algorithm's call has
// one step, 0), "COLL.seqQ.stepS" (the same among its calls of sequence number Q and
// later) or "COLL.seqQ" (the first transfer of such a call, whatever its step); its rank is the
// engine's (the rank the process had when the job formed, or the place a newcomer took).
std::function<void(int rank, const algorithms::CallInfo& call, std::uint32_t step)> stepFaults();

}  // namespace collx::detail
