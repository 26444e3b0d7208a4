// alltoall bruck: Bruck's algorithm, ceil(log2 P) rounds instead of P-1 for small blocks,
// at the price of moving every block about log2(P)/2 times.
//
// Positions: at rank r, position i (0..P-1) starts as the block for rank r+i. Round k
// (pof = 2^k, k = 0..ceil(log2 P)-1): rank r sends every position with bit k set, packed
// into one message, to r + pof, and receives the same positions from r - pof, which replace
// its own. A block at position i thus travels i ranks forward in the rounds of i's set bits,
// and after the last round position i holds the block from rank r - i for r. Steps:
// 1. own block: copied from the input to the output;
// 2. each round: pack (copies into scratch), send, receive (into scratch), unpack (copies);
//    a received position is unpacked straight to its final place, output block r - i, and
//    later rounds pack it from there, so there is no final rotation.
//
//   P=4, rank 0, positions p0..p3 (block for 0, 1, 2, 3 at first):
//   round 0 (pof 1, positions 1 and 3): send p1 p3 to 1, receive p1 p3 from 3
//   round 1 (pof 2, positions 2 and 3): send p2 p3 to 2, receive p2 p3 from 2
//   now p_i is rank (0 - i)'s block for rank 0: output block (0 - i) mod 4
//
// Cost (b bytes per block): ceil(log2 P) alpha + B beta with B = b * (number of set bits in
// 0..P-1), about b P/2 log2 P, against (P-1) alpha + (P-1) b beta for pairwise; plus the
// packing copies. Exactly: in round k one send and one receive of b * |{i < P: i & 2^k}|
// bytes. Any P. Scratch: two send and two receive areas of ceil(P/2) blocks (a round packs
// while the previous round's message may still be in flight).
//
// alltoall only: with per-rank counts the intermediate ranks need every block's size, which
// alltoallv/bruck.cc learns from an exchange of the counts before it builds its schedule.
#include <algorithm>

#include "../builders.h"
#include "../patterns.h"

namespace collx::algorithms {

namespace {

// The positions with bit k set, in increasing order.
std::vector<int> positionsOf(int P, int k) {
  std::vector<int> out;
  for (int i = 1; i < P; ++i) {
    if ((i >> k) & 1) out.push_back(i);
  }
  return out;
}

}  // namespace

Schedule buildAlltoallBruck(const ScheduleParams& p) {
  Schedule s("bruck");
  const int P = p.size, r = p.rank;
  const std::uint64_t es = p.elementSize, b = p.count * es;
  auto home = [&](int i) { return output(p.recvDispls[patterns::mod(r - i, P)] * es); };
  if (b > 0) s.copy(output(p.recvDispls[r] * es), input(p.displs[r] * es), b);
  if (P == 1) return s;
  const int rounds = patterns::log2Exact(P);
  const std::uint64_t area = static_cast<std::uint64_t>((P + 1) / 2) * b;
  s.setScratchBytes(4 * area);
  auto sendArea = [&](int k, std::uint64_t off) { return scratch((k % 2) * area + off); };
  auto recvArea = [&](int k, std::uint64_t off) { return scratch((2 + k % 2) * area + off); };
  std::vector<bool> moved(P, false);       // position i already lives at home(i)
  std::vector<Deps> written(P);            // the unpack that wrote home(i)
  std::vector<Deps> sent(2), unpacked(2);  // what must end before an area is reused
  for (int k = 0; k < rounds; ++k) {
    const int pof = 1 << k;
    const std::vector<int> positions = positionsOf(P, k);
    const std::uint64_t bytes = positions.size() * b;
    const auto step = static_cast<std::uint32_t>(k);
    // Pack: after the send two rounds back (same area) and after each position's last write.
    Deps packed;
    std::vector<Deps> readers(P);
    for (std::size_t x = 0; x < positions.size() && b > 0; ++x) {
      const int i = positions[x];
      BufferRef from = moved[i] ? home(i) : input(p.displs[patterns::mod(r + i, P)] * es);
      Deps deps = sent[k % 2];
      deps.insert(deps.end(), written[i].begin(), written[i].end());
      const TaskId copy = s.copy(sendArea(k, x * b), from, b, deps);
      packed.push_back(copy);
      readers[i].push_back(copy);
    }
    if (b == 0) packed = sent[k % 2];
    TaskId got = s.recv(patterns::mod(r - pof, P), step, recvArea(k, 0), bytes, unpacked[k % 2]);
    sent[k % 2] = {s.send(patterns::mod(r + pof, P), step, sendArea(k, 0), bytes, packed)};
    // Unpack to the final places, once this round's packing has read them.
    unpacked[k % 2] = {got};
    for (std::size_t x = 0; x < positions.size() && b > 0; ++x) {
      const int i = positions[x];
      Deps deps = readers[i];
      deps.push_back(got);
      const TaskId copy = s.copy(home(i), recvArea(k, x * b), b, deps);
      unpacked[k % 2].push_back(copy);
      written[i] = {copy};
      moved[i] = true;
    }
  }
  return s;
}

Cost costAlltoallBruck(const ScheduleParams& p) {
  Cost c;
  const int P = p.size;
  const std::uint64_t b = p.count * p.elementSize;
  for (int k = 0; (1 << k) < P; ++k) {
    const std::uint64_t bytes = positionsOf(P, k).size() * b;
    c.sends += 1;
    c.recvs += 1;
    c.sendBytes += bytes;
    c.recvBytes += bytes;
  }
  return c;
}

const AlgorithmInfo kAlltoallBruck{
    .coll = Collective::kAlltoall,
    .name = "bruck",
    .summary =
        "Bruck: ceil(log2 P) steps, each packing the blocks whose bit k is set; about n/2 log P "
        "bytes; small blocks (alltoall only)",
    .build = buildAlltoallBruck,
    .cost = costAlltoallBruck,
    .doc = {
        .rounds = "ceil(log2 P); one less when P <= 3 * 2^(ceil(log2 P) - 2)",
        .perRank = "ceil(log2 P) messages, round j the positions with bit j set: n times the set "
                   "bits of 1..P-1 in all (about P/2 log2 P n)",
        .cost = "ceil(log2 P) alpha + (set bits of 1..P-1) n beta, plus the packing copies",
        .restrictions = "equal blocks (alltoallv has its own, below); any P; for small blocks"}};

}  // namespace collx::algorithms
