// allreduce ring_chunked: Gloo's ring with 2*P chunks (gloo/allreduce_ring_chunked.h): every
// segment of the ring (see ring.cc) moves as two chunks, so that one chunk is in flight while the
// other is reduced (double buffering). Unlike Gloo's, a chunk is at most 256 KiB: a segment above
// 512 KiB moves in as many chunks of 256 KiB as it takes, each within the transports' eager
// limit, so none waits for its receiver.
//
// Steps: 2 * 2(P-1) transfers per rank (segments up to 512 KiB). Bytes on the wire per rank:
// 2(P-1)/P * n (Gloo counts 2n for its in-place broadcast phase). Cost: 4(P-1) alpha + 2(P-1)/P n
// beta + (P-1)/P n gamma. Any P, any count. Exact counts: those of ring.cc with pieces of
// min(ceil(s_0 / 2) elements, 256 KiB) (costAllreduceRingPieces).
#include "../builders.h"

namespace collx::algorithms {

Cost costAllreduceRingChunked(const ScheduleParams& p) { return costAllreduceRingPieces(p, 2); }

Schedule buildAllreduceRingChunked(const ScheduleParams& p) {
  return buildAllreduceRingPieces(p, 2, "ring_chunked");
}

const AlgorithmInfo kAllreduceRingChunked{
    .coll = Collective::kAllreduce,
    .name = "ring_chunked",
    .summary =
        "Gloo's ring with 2P chunks (double buffering) of at most 256 KiB; 4(P-1) steps, "
        "2(P-1)/P n bytes",
    .build = buildAllreduceRingChunked,
    .cost = costAllreduceRingChunked,
    .doc = {.rounds = "2(P-1)",
            .perRank = "4(P-1) messages (2 pieces per segment, more above 512 KiB: pieces of at "
                       "most 256 KiB), 2(P-1)/P n bytes",
            .cost = "4(P-1) alpha + 2(P-1)/P n beta + (P-1)/P n gamma",
            .restrictions = "any P, any count"}};

}  // namespace collx::algorithms
