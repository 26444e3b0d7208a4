// Fault injection for the recovery's tests and trials (COLLX_FAULT): a process kills,
// stops or slows itself at a chosen point of revoke, agree, shrink, grow, reform or join.
#pragma once

namespace collx::detail {

// The points: "revoke", "agree.entered" (its entry is in the store), "agree.decided" (it read
// the answer), "regroup.planned" (the members of shrink, grow or reform are known),
// "regroup.reformed" (the old generation ended here), "regroup.met" (the members and the
// newcomers published their addresses), "regroup.connected" (the newcomers' connections
// are made), "join.ticket" (a newcomer took its ticket), "join.connected" (a
// newcomer's connections are made). Does what COLLX_FAULT says for `point` on `rank` (the
// context's rank there; -1 for a newcomer before it has one), else nothing.
void faultAt(const char* point, int rank);

}  // namespace collx::detail
