// allreduce halving_doubling (Rabenseifner): a reduce-scatter by recursive halving, then an
// allgather by recursive doubling.
//
// With p ranks in the main phase (P folded onto its largest power of two as in
// recursive_doubling.cc), the vector is split into p blocks. Reduce-scatter round j: rank
// nr pairs with nr ^ 2^j (distances 1, 2, ..., p/2), keeps the half of its current window
// of blocks that holds its target block and sends the other half; the partner's half is
// reduced into it. Allgather rounds pair the same ranks in reverse (distances p/2, ..., 1)
// and exchange ever larger windows. Pairing at increasing distances makes every partial a
// reduction over a contiguous range of ranks, which is what keeps rank order; for the
// windows to stay contiguous in memory, rank nr's target block is reverseBits(nr)
// ("position" v below; the partner of round j is at position v ^ p/2^(j+1)).
//
//   p=4, blocks b0..b3 (target: rank0 b0, rank1 b2, rank2 b1, rank3 b3):
//   RS 1st (0-1, 2-3):  0,2 keep b0b1;  1,3 keep b2b3      (partials over {0,1} or {2,3})
//   RS 2nd (0-2, 1-3):  0 b0, 2 b1, 1 b2, 3 b3 reduced over all four
//   AG 1st (0-2, 1-3):  0,2 hold b0b1;  1,3 hold b2b3       AG 2nd (0-1, 2-3): all hold all
//
// Rank order: the lower range of ranks is always the left operand (the fold too: 2i op
// 2i+1), so non-commutative ops are exact and every block is reduced by exactly one rank.
//
// Cost: 2 log2 p alpha + 2 (p-1)/p n beta + (p-1)/p n gamma (+ 2 alpha + 2 n beta + n gamma
// when P is not a power of two: the vector folds in and the result folds out). Exactly, for a rank
// in the main phase: 2 log2 p sends and receives; the reduce-scatter sends and reduces the window
// halves (n - n_own elements in all, n_own its block's share of Blocks{count, p}), the allgather
// receives n - n_own bytes and sends as much; the folded pairs add one message of n each way (one
// reduction of n at 2i+1). Any P.
#include <algorithm>

#include "../builders.h"
#include "../patterns.h"

namespace collx::algorithms {

Schedule buildAllreduceHalvingDoubling(const ScheduleParams& p) {
  const int P = p.size;
  if (P == 1) return buildLocalOnly(p, "halving_doubling");
  const int r = p.rank;
  const std::uint64_t es = p.elementSize;
  const std::uint64_t n = p.bytes();
  const patterns::Fold fold(P);
  const int nr = fold.newRank(r);
  const int rounds = patterns::log2Exact(fold.pow2);
  const std::uint32_t postStep = static_cast<std::uint32_t>(2 * rounds + 1);
  const patterns::Blocks blocks{p.count, fold.pow2};
  Schedule s("halving_doubling");
  s.setScratchBytes(n);
  Deps prev;
  if (!p.inPlace && n > 0) prev.push_back(s.copy(output(), input(), n));

  if (nr < 0) {
    TaskId sent = s.send(r + 1, 0, output(), n, prev);
    s.recv(r + 1, postStep, output(), n, {sent});
    return s;
  }
  if (r < 2 * fold.rem) {  // (2i) op (2i+1): the partner's vector is the left operand
    TaskId got = s.recv(r - 1, 0, scratch(), n, prev);
    prev = {s.reduce(output(), scratch(), output(), p.count, {got})};
  }
  const int v = patterns::reverseBits(nr, rounds);  // this rank's target block
  auto partnerAt = [&](int position) {
    return fold.realRank(patterns::reverseBits(position, rounds));
  };
  // Reduce-scatter by recursive halving over the window [lo, hi) of blocks.
  int lo = 0, hi = fold.pow2;
  Deps sends;
  for (int j = 0; j < rounds; ++j) {
    const int d = fold.pow2 >> (j + 1);
    const int partner = partnerAt(v ^ d);
    const auto [keepLo, keepHi, giveLo, giveHi] = patterns::halve(v, d, lo, hi);
    const std::uint64_t keepOff = blocks.rangeOffset(keepLo) * es;
    const std::uint64_t keepN = blocks.rangeSize(keepLo, keepHi);
    const std::uint64_t giveOff = blocks.rangeOffset(giveLo) * es;
    const std::uint64_t giveN = blocks.rangeSize(giveLo, giveHi);
    const std::uint32_t step = static_cast<std::uint32_t>(j + 1);
    TaskId sent = s.send(partner, step, output(giveOff), giveN * es, prev);
    sends.push_back(sent);
    TaskId got = s.recv(partner, step, scratch(keepOff), keepN * es, prev);
    prev = {partner < r
                ? s.reduce(output(keepOff), scratch(keepOff), output(keepOff), keepN, {got})
                : s.reduce(output(keepOff), output(keepOff), scratch(keepOff), keepN, {got})};
    lo = keepLo;
    hi = keepHi;
  }
  if (p.op == ReduceOpKind::kAvg) {
    prev = {s.divide(output(blocks.rangeOffset(lo) * es), blocks.rangeSize(lo, hi), prev)};
  }
  // Allgather by recursive doubling: windows of d blocks grow to the whole vector.
  Deps received = sends;  // no receive may overwrite what a reduce-scatter send still reads
  for (int j = 0; j < rounds; ++j) {
    const int d = 1 << j;
    const int partner = partnerAt(v ^ d);
    const int myLo = (v / d) * d;
    const int theirLo = ((v ^ d) / d) * d;
    const std::uint32_t step = static_cast<std::uint32_t>(rounds + j + 1);
    TaskId sent = s.send(partner, step, output(blocks.rangeOffset(myLo) * es),
                         blocks.rangeSize(myLo, myLo + d) * es, prev);
    Deps deps = received;
    deps.insert(deps.end(), prev.begin(), prev.end());
    TaskId got = s.recv(partner, step, output(blocks.rangeOffset(theirLo) * es),
                        blocks.rangeSize(theirLo, theirLo + d) * es, deps);
    prev = {sent, got};
    received = {got};
  }
  if (r < 2 * fold.rem) s.send(r - 1, postStep, output(), n, prev);
  return s;
}

Cost costAllreduceHalvingDoubling(const ScheduleParams& p) {
  Cost c;
  const int P = p.size, r = p.rank;
  if (P == 1) return c;
  const std::uint64_t es = p.elementSize, n = p.bytes();
  const patterns::Fold fold(P);
  const int nr = fold.newRank(r);
  if (nr < 0) return Cost{1, n, 1, n, 0};
  if (r < 2 * fold.rem) c = Cost{1, n, 1, n, p.count};
  const int rounds = patterns::log2Exact(fold.pow2);
  const int v = patterns::reverseBits(nr, rounds);
  const patterns::Blocks blocks{p.count, fold.pow2};
  // Reduce-scatter round j gives and keeps halves of the 2^(rounds-j) blocks around v; the
  // allgather mirrors it: what was given is received back, what was kept is sent.
  for (int j = 0; j < rounds; ++j) {
    const int half = fold.pow2 >> (j + 1);
    const int lo = v / (2 * half) * (2 * half);
    const int keepLo = v - lo < half ? lo : lo + half, giveLo = keepLo == lo ? lo + half : lo;
    const std::uint64_t keep = blocks.rangeSize(keepLo, keepLo + half);
    const std::uint64_t give = blocks.rangeSize(giveLo, giveLo + half);
    c.sends += 2;
    c.recvs += 2;
    c.sendBytes += (give + keep) * es;
    c.recvBytes += (keep + give) * es;
    c.reducedElements += keep;
  }
  return c;
}

const AlgorithmInfo kAllreduceHalvingDoubling{
    .coll = Collective::kAllreduce,
    .name = "halving_doubling",
    .summary =
        "Rabenseifner: recursive-halving reduce-scatter + recursive-doubling allgather; "
        "2 log P steps, 2(P-1)/P n bytes; keeps rank order",
    .build = buildAllreduceHalvingDoubling,
    .cost = costAllreduceHalvingDoubling,
    .keepsOrder = true,
    .doc = {.rounds = "2 log2 p, +2 when P != p",
            .perRank = "2 log2 p messages, 2(p-1)/p n bytes; +1 message of n for the odd rank of a "
                       "folded pair",
            .cost = "2 log2 p alpha + 2(p-1)/p n beta + (p-1)/p n gamma, + 2 alpha + 2 n beta + n "
                    "gamma when P != p",
            .restrictions = "any P, any count"}};

}  // namespace collx::algorithms
