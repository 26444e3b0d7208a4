// allreduce ring: reduce-scatter around the ring, then allgather around the ring, each
// segment moved in pieces so that receiving, reducing and forwarding overlap.
//
// The vector is split into P segments (sizes differ by at most one element). In the
// reduce-scatter, at step s (0..P-2) rank r sends segment (r-s) to r+1 and receives segment
// (r-s-1) from r-1, which it reduces into its own contribution; after P-1 steps rank r holds
// segment (r+1) fully reduced. In the allgather, at step s rank r sends segment (r+1-s) and
// receives segment (r-s) into the output. Who holds which reduced segment, P=4 (x: partial,
// R: fully reduced):
//
//   after step   rank0  rank1  rank2  rank3
//   RS 0         s3x    s0x    s1x    s2x
//   RS 1         s2x    s3x    s0x    s1x
//   RS 2         s1R    s2R    s3R    s0R
//   AG 0..2      every rank receives the other three R segments in turn
//
// Pieces: each segment moves in pieces of at most chunkBytes (ring) or in 2 pieces
// (ring_chunked, Gloo's 2P chunks with double buffering), more where 2 would exceed 256 KiB. A
// piece received in the reduce-scatter lands in one of 4 scratch slots, is reduced, and is
// forwarded at the next step, so up to 4 pieces are in flight per neighbour.
//
// Cost (n bytes): 2(P-1) steps (x pieces), each rank sends and receives 2(P-1)/P * n bytes
// and reduces (P-1)/P * n bytes: 2(P-1) alpha + 2(P-1)/P n beta + (P-1)/P n gamma.
// Exactly (costAllreduceRingPieces), with s_i the size of segment i and k_i its number of
// pieces: rank r sends every segment but r+1 (reduce-scatter) and every segment but r+2
// (allgather), receives every segment but r and every segment but r+1, and reduces the
// n - s_r elements it receives in the reduce-scatter; a message per non-empty piece.
// Bandwidth-optimal; latency grows linearly with P. Works for any P and any count (pieces
// of empty segments are skipped alike on both sides). Results are bit-identical on every
// rank: each segment is reduced once, in ring order, and then copied.
#include <algorithm>
#include <optional>

#include "../builders.h"
#include "../patterns.h"
#include "collx/base/units.h"

namespace collx::algorithms {

namespace {
constexpr std::uint64_t kScratchSlots = 4;

// ring_chunked's pieces are at most the eager limit both transports default to, so that
// each goes without waiting for the receiver and the pipeline stays full; a larger one
// would wait for a round trip, and over shared memory move as a single copy set up per
// piece (P = 2, AMD EPYC VM, 2026-11-28: with two pieces of 320 KiB a segment, 1.25 MiB took
// 1.11x shm's time; with pieces of 256 KiB, 2 MiB took 165 us against shm's 183).
constexpr std::uint64_t kChunkedPieceMaxBytes = 256 * kKiB;

// Elements per piece: of chunkBytes (piecesPerSegment 0), else `piecesPerSegment` per
// segment of the largest size `maxSeg`, more if that would exceed kChunkedPieceMaxBytes.
std::uint64_t ringPieceElems(const ScheduleParams& p, std::uint64_t maxSeg,
                             std::uint64_t piecesPerSegment) {
  const std::uint64_t es = p.elementSize;
  if (piecesPerSegment == 0) return std::max<std::uint64_t>(1, p.chunkBytes / es);
  const std::uint64_t even = patterns::ceilDiv(maxSeg, piecesPerSegment);
  return std::max<std::uint64_t>(1, std::min(even, kChunkedPieceMaxBytes / es));
}
}  // namespace

Schedule buildLocalOnly(const ScheduleParams& p, const char* name) {
  Schedule s(name);
  if (!p.inPlace && p.bytes() > 0) s.copy(output(), input(), p.bytes());
  return s;
}

Schedule buildAllreduceRingPieces(const ScheduleParams& p, std::uint64_t piecesPerSegment,
                                  const char* name) {
  const int P = p.size;
  if (P == 1) return buildLocalOnly(p, name);
  const int r = p.rank;
  const int left = patterns::mod(r - 1, P);
  const int right = patterns::mod(r + 1, P);
  const std::uint64_t es = p.elementSize;
  const patterns::Blocks seg{p.count, P};
  const std::uint64_t maxSeg = seg.size(0);
  const std::uint64_t pieceElems = ringPieceElems(p, maxSeg, piecesPerSegment);
  const std::uint64_t K = maxSeg == 0 ? 0 : (maxSeg + pieceElems - 1) / pieceElems;
  const std::uint64_t slots = std::min<std::uint64_t>(kScratchSlots, K * (P - 1));
  // A piece never exceeds its segment: slots sized by chunkBytes alone would make a 4-byte
  // allreduce ask for 4 MiB of scratch (found by the simulator at P = 1024).
  const std::uint64_t slotElems = std::min(pieceElems, maxSeg);
  Schedule s(name);
  s.setScratchBytes(slots * slotElems * es);
  auto contribution = [&](std::uint64_t byteOffset) {
    return p.inPlace ? output(byteOffset) : input(byteOffset);
  };
  // Piece k of segment i: [offset, offset + n) elements; n may be 0.
  auto piece = [&](int i, std::uint64_t k) {
    std::uint64_t size = seg.size(i);
    std::uint64_t begin = std::min(size, k * pieceElems);
    std::uint64_t end = std::min(size, begin + pieceElems);
    return std::pair<std::uint64_t, std::uint64_t>{seg.offset(i) + begin, end - begin};
  };

  // Task ids by (step, piece); nullopt where the piece is empty.
  using Id = std::optional<TaskId>;
  std::vector<Id> rsSend(K * (P - 1)), rsReduce(K * (P - 1)), last(K);
  std::vector<Id> slotUser(slots);  // the reduce that last read each scratch slot

  // Reduce-scatter.
  std::uint64_t g = 0;  // global piece index, for scratch slots
  for (int st = 0; st + 1 < P; ++st) {
    const int sendSeg = patterns::mod(r - st, P);
    const int recvSeg = patterns::mod(r - st - 1, P);
    for (std::uint64_t k = 0; k < K; ++k, ++g) {
      const std::uint32_t step = static_cast<std::uint32_t>(st * K + k);
      auto [recvOff, recvN] = piece(recvSeg, k);
      auto [sendOff, sendN] = piece(sendSeg, k);
      if (recvN > 0) {
        std::uint64_t slot = g % slots;
        Deps deps;
        if (slotUser[slot]) deps.push_back(*slotUser[slot]);
        TaskId recv = s.recv(left, step, scratch(slot * slotElems * es), recvN * es, deps);
        TaskId red = s.reduce(output(recvOff * es), contribution(recvOff * es),
                              scratch(slot * slotElems * es), recvN, {recv});
        slotUser[slot] = red;
        rsReduce[st * K + k] = red;
      }
      if (sendN > 0) {
        Deps deps;
        if (st > 0 && rsReduce[(st - 1) * K + k]) deps.push_back(*rsReduce[(st - 1) * K + k]);
        BufferRef src = st == 0 ? contribution(sendOff * es) : output(sendOff * es);
        rsSend[st * K + k] = s.send(right, step, src, sendN * es, deps);
      }
    }
  }
  // avg: rank r divides the segment it holds fully reduced, (r+1), before sharing it.
  const int own = patterns::mod(r + 1, P);
  for (std::uint64_t k = 0; k < K; ++k) {
    last[k] = rsReduce[(P - 2) * K + k];
    auto [off, n] = piece(own, k);
    if (p.op == ReduceOpKind::kAvg && n > 0) {
      Deps deps;
      if (last[k]) deps.push_back(*last[k]);
      last[k] = s.divide(output(off * es), n, deps);
    }
  }
  // Allgather.
  std::vector<Id> agRecv(K * (P - 1));
  for (int st = 0; st + 1 < P; ++st) {
    const int sendSeg = patterns::mod(r + 1 - st, P);
    const int recvSeg = patterns::mod(r - st, P);
    for (std::uint64_t k = 0; k < K; ++k) {
      const std::uint32_t step = static_cast<std::uint32_t>((P - 1 + st) * K + k);
      auto [recvOff, recvN] = piece(recvSeg, k);
      auto [sendOff, sendN] = piece(sendSeg, k);
      if (recvN > 0) {
        // The region is the one this rank sent from at reduce-scatter step st: that send
        // must be out before the region is overwritten.
        Deps deps;
        if ((st > 0 || p.inPlace) && rsSend[st * K + k]) deps.push_back(*rsSend[st * K + k]);
        agRecv[st * K + k] = s.recv(left, step, output(recvOff * es), recvN * es, deps);
      }
      if (sendN > 0) {
        Deps deps;
        Id before = st == 0 ? last[k] : agRecv[(st - 1) * K + k];
        if (before) deps.push_back(*before);
        s.send(right, step, output(sendOff * es), sendN * es, deps);
      }
    }
  }
  return s;
}

Cost costAllreduceRingPieces(const ScheduleParams& p, std::uint64_t piecesPerSegment) {
  const int P = p.size;
  if (P == 1) return {};
  const int r = p.rank;
  const std::uint64_t es = p.elementSize, n = p.count;
  const patterns::Blocks seg{n, P};
  const std::uint64_t pieceElems = ringPieceElems(p, seg.size(0), piecesPerSegment);
  // Segments are q+1 elements (the first n mod P) or q.
  const std::uint64_t q = n / static_cast<std::uint64_t>(P),
                      extra = n % static_cast<std::uint64_t>(P);
  const std::uint64_t allPieces =
      extra * patterns::piecesOf(q + 1, pieceElems) +
      (static_cast<std::uint64_t>(P) - extra) * patterns::piecesOf(q, pieceElems);
  auto s = [&](int i) { return seg.size(patterns::mod(i, P)); };
  auto k = [&](int i) { return patterns::piecesOf(s(i), pieceElems); };
  Cost c;
  c.sends = 2 * allPieces - k(r + 1) - k(r + 2);
  c.sendBytes = (2 * n - s(r + 1) - s(r + 2)) * es;
  c.recvs = 2 * allPieces - k(r) - k(r + 1);
  c.recvBytes = (2 * n - s(r) - s(r + 1)) * es;
  c.reducedElements = n - s(r);
  return c;
}

Cost costAllreduceRing(const ScheduleParams& p) { return costAllreduceRingPieces(p, 0); }

Schedule buildAllreduceRing(const ScheduleParams& p) {
  return buildAllreduceRingPieces(p, 0, "ring");
}

const AlgorithmInfo kAllreduceRing{
    .coll = Collective::kAllreduce,
    .name = "ring",
    .summary =
        "reduce-scatter + allgather around the ring, pipelined in chunks; 2(P-1) steps, "
        "2(P-1)/P n bytes; bandwidth-optimal",
    .build = buildAllreduceRing,
    .cost = costAllreduceRing,
    .doc = {.rounds = "2(P-1)",
            .perRank = "2(P-1) k messages, 2(P-1)/P n bytes",
            .cost = "2(P-1) alpha + 2(P-1)/P n beta + (P-1)/P n gamma",
            .restrictions = "any P, any count; bandwidth-optimal, latency linear in P"}};

}  // namespace collx::algorithms
