// reduce reduce_scatter_gather (Rabenseifner's reduce): a reduce-scatter by recursive
// halving leaves every rank with one block of the result, then a binomial gather brings the
// blocks to the root. For large vectors: the root receives about n bytes instead of the
// binomial tree's n log2 P, and the reductions are spread over every rank.
//
// Steps (p the largest power of two <= P, the vector split into p blocks):
// 1. Fold (P != p): the pairs (2i, 2i+1), i < rem = P - p, combine first; the rank that
//    stays is 2i+1, or 2i when 2i is the root (so the root never folds out). The other one
//    sends its vector (step 0) and is done.
// 2. Reduce-scatter, round j (steps 1..log2 p): new rank nr pairs with nr ^ 2^j, each sends
//    the half of its window the other keeps and reduces the half it keeps. Pairing at
//    increasing distances makes every partial a contiguous range of ranks; for the windows
//    to stay contiguous in memory, rank nr ends with block v = reverseBits(nr) (its
//    "position"), and in round j the partner sits at position v ^ p/2^(j+1).
// 3. avg: every rank divides its block by P.
// 4. Gather, round j (steps log2 p + 1..2 log2 p): with rel = v ^ v_root, a rank whose
//    rel has bit j set sends the 2^j blocks it holds to position v ^ 2^j and is done; the
//    others receive the neighbouring 2^j blocks. The root ends with all p blocks.
//
//   p=4, root 0, blocks b0..b3 (rank0 ends RS with b0, rank1 b2, rank2 b1, rank3 b3):
//   RS 1st (0-1, 2-3)   0,2: b0b1 partial   1,3: b2b3 partial
//   RS 2nd (0-2, 1-3)   0: b0  2: b1  1: b2  3: b3   (each reduced over all ranks)
//   gather 1st          2 -> 0 (b1), 3 -> 1 (b3)     0: b0b1   1: b2b3
//   gather 2nd          1 -> 0 (b2b3)                0: b0b1b2b3
//
// Rank order: the lower range of ranks is always the left operand (the fold too: 2i op
// 2i+1), so non-commutative ops are exact, for every root.
//
// Cost: 2 log2 p alpha + 2 (p-1)/p n beta + (p-1)/p n gamma at the root (+ alpha + n beta +
// n gamma on the folded pairs). Exactly, per rank in the main phase: log2 p sends, receives
// and reductions of window halves (from Blocks{count, p}); then the gather: receives of
// 2^j blocks for each low zero bit j of rel (all log2 p rounds at the root) and, unless it
// is the root, one send of the 2^(trailing zeros of rel) blocks it holds. The rank that
// folds out sends n bytes once; the one that stays receives n and reduces count elements.
// Scratch: the accumulator (the root's output at the root) and a receive area of n bytes.
// Any P, any root, any count (empty blocks travel as zero-byte messages).
#include <algorithm>

#include "../builders.h"
#include "../patterns.h"

namespace collx::algorithms {

namespace {

constexpr const char* kName = "reduce_scatter_gather";

// The rank arithmetic both the builder and the cost formula follow.
struct Plan {
  explicit Plan(const ScheduleParams& p)
      : fold(p.size, p.root),
        bits(patterns::log2Exact(fold.pow2)),
        blocks{p.count, fold.pow2},
        nr(fold.newRank(p.rank)),
        v(nr < 0 ? -1 : patterns::reverseBits(nr, bits)),
        rootV(patterns::reverseBits(fold.newRank(p.root), bits)) {}
  // The real rank at position q.
  int rankAt(int q) const { return fold.realRank(patterns::reverseBits(q, bits)); }
  patterns::RootedFold fold;
  int bits;
  patterns::Blocks blocks;
  int nr;
  int v;
  int rootV;
};

}  // namespace

Schedule buildReduceReduceScatterGather(const ScheduleParams& p) {
  const int P = p.size, r = p.rank;
  const std::uint64_t es = p.elementSize, n = p.bytes();
  Schedule s(kName);
  if (P == 1) {
    if (!p.inPlace && n > 0) s.copy(output(), input(), n);
    return s;
  }
  const Plan plan(p);
  const auto& blocks = plan.blocks;
  const bool isRoot = r == p.root;
  const BufferRef mine0 = p.inPlace ? output() : input();
  auto mine = [&](std::uint64_t byteOffset) {
    return p.inPlace ? output(byteOffset) : input(byteOffset);
  };
  if (plan.nr < 0) {  // folds out: its vector goes to the rank that stays
    s.send(plan.fold.partnerOf(r), 0, mine0, n);
    return s;
  }
  // The accumulator: the output at the root, else scratch; received halves land after it.
  const std::uint64_t recvBase = isRoot ? 0 : n;
  s.setScratchBytes(recvBase + n);
  auto acc = [&](std::uint64_t byteOffset) {
    return isRoot ? output(byteOffset) : scratch(byteOffset);
  };
  auto incoming = [&](std::uint64_t byteOffset) { return scratch(recvBase + byteOffset); };
  bool accReady = false;
  Deps prev;
  if (plan.fold.survivorOf(r) == r) {  // (2i) op (2i+1)
    const int partner = plan.fold.partnerOf(r);
    TaskId got = s.recv(partner, 0, incoming(0), n);
    prev = {partner < r ? s.reduce(acc(0), incoming(0), mine0, p.count, {got})
                        : s.reduce(acc(0), mine0, incoming(0), p.count, {got})};
    accReady = true;
  }
  // Reduce-scatter over the window [lo, hi) of block positions.
  const int v = plan.v;
  int lo = 0, hi = plan.fold.pow2;
  Deps sends;
  for (int j = 0; j < plan.bits; ++j) {
    const int d = plan.fold.pow2 >> (j + 1);
    const int partner = plan.rankAt(v ^ d);
    const auto [keepLo, keepHi, giveLo, giveHi] = patterns::halve(v, d, lo, hi);
    const std::uint64_t keepOff = blocks.rangeOffset(keepLo) * es;
    const std::uint64_t keepN = blocks.rangeSize(keepLo, keepHi);
    const std::uint64_t giveOff = blocks.rangeOffset(giveLo) * es;
    const auto step = static_cast<std::uint32_t>(j + 1);
    BufferRef give = accReady ? acc(giveOff) : mine(giveOff);
    sends.push_back(s.send(partner, step, give, blocks.rangeSize(giveLo, giveHi) * es, prev));
    TaskId got = s.recv(partner, step, incoming(keepOff), keepN * es, prev);
    BufferRef kept = accReady ? acc(keepOff) : mine(keepOff);
    prev = {partner < r ? s.reduce(acc(keepOff), incoming(keepOff), kept, keepN, {got})
                        : s.reduce(acc(keepOff), kept, incoming(keepOff), keepN, {got})};
    accReady = true;
    lo = keepLo;
    hi = keepHi;
  }
  if (p.op == ReduceOpKind::kAvg && blocks.size(v) > 0) {
    prev = {s.divide(acc(blocks.offset(v) * es), blocks.size(v), prev)};
  }
  // Gather towards the root's position: windows of 2^j blocks double.
  const int rel = v ^ plan.rootV;
  for (int j = 0; j < plan.bits; ++j) {
    const int d = 1 << j;
    const int partner = plan.rankAt(v ^ d);
    const auto step = static_cast<std::uint32_t>(plan.bits + j + 1);
    if (rel & d) {
      const int myLo = v / d * d;
      s.send(partner, step, acc(blocks.rangeOffset(myLo) * es),
             blocks.rangeSize(myLo, myLo + d) * es, prev);
      break;
    }
    // The window arriving was given away during the reduce-scatter: those sends must be out.
    const int theirLo = (v ^ d) / d * d;
    Deps deps = sends;
    deps.insert(deps.end(), prev.begin(), prev.end());
    prev = {s.recv(partner, step, acc(blocks.rangeOffset(theirLo) * es),
                   blocks.rangeSize(theirLo, theirLo + d) * es, deps)};
  }
  return s;
}

Cost costReduceReduceScatterGather(const ScheduleParams& p) {
  const int P = p.size, r = p.rank;
  const std::uint64_t es = p.elementSize, n = p.bytes();
  if (P == 1) return Cost{};
  const Plan plan(p);
  if (plan.nr < 0) return Cost{1, n, 0, 0, 0};
  Cost c;
  if (plan.fold.survivorOf(r) == r) c = Cost{0, 0, 1, n, p.count};
  const int v = plan.v;
  for (int j = 0; j < plan.bits; ++j) {  // reduce-scatter: windows of 2^(bits-j) halve
    const int half = plan.fold.pow2 >> (j + 1);
    const int lo = v / (2 * half) * (2 * half);
    const int keepLo = v - lo < half ? lo : lo + half, giveLo = keepLo == lo ? lo + half : lo;
    const std::uint64_t keep = plan.blocks.rangeSize(keepLo, keepLo + half);
    c.sends += 1;
    c.sendBytes += plan.blocks.rangeSize(giveLo, giveLo + half) * es;
    c.recvs += 1;
    c.recvBytes += keep * es;
    c.reducedElements += keep;
  }
  const int rel = v ^ plan.rootV;
  for (int j = 0; j < plan.bits; ++j) {  // gather: receive until bit j of rel is set
    const int d = 1 << j;
    if (rel & d) {
      const int myLo = v / d * d;
      c.sends += 1;
      c.sendBytes += plan.blocks.rangeSize(myLo, myLo + d) * es;
      break;
    }
    const int theirLo = (v ^ d) / d * d;
    c.recvs += 1;
    c.recvBytes += plan.blocks.rangeSize(theirLo, theirLo + d) * es;
  }
  return c;
}

const AlgorithmInfo kReduceReduceScatterGather{
    .coll = Collective::kReduce,
    .name = "reduce_scatter_gather",
    .summary =
        "Rabenseifner: recursive-halving reduce-scatter + binomial gather to the root; 2 log P "
        "steps, about 2n bytes at the root; large vectors; keeps rank order",
    .build = buildReduceReduceScatterGather,
    .cost = costReduceReduceScatterGather,
    .keepsOrder = true,
    .doc = {.rounds = "2 log2 p; up to 2 log2 p + 1 when P != p",
            .perRank =
                "log2 p messages of halves, (p-1)/p n bytes, then at most one gather message (up "
                "to n/2); the root receives about 2(p-1)/p n; a rank that folds out sends n once",
            .cost = "2 log2 p alpha + 2(p-1)/p n beta + (p-1)/p n gamma at the root, + alpha + n "
                    "beta + n gamma when P != p",
            .restrictions = "any P, any root, any count; for large n",
            .orderNote = ", for every root"}};

}  // namespace collx::algorithms
