// allreduce halving_doubling (Rabenseifner): a reduce-scatter by recursive halving, then an
// allgather by recursive doubling.
//
// With p ranks in the main phase (P folded onto its largest power of two as in
// recursive_doubling.cc), the vector is split into p blocks. Reduce-scatter round j
// (distance d = p/2, p/4, ..., 1): rank nr keeps the half of its current window on its side
// of nr ^ d, sends the other half to nr ^ d and reduces the half it receives; at the end it
// holds block nr reduced. Allgather rounds (d = 1, 2, ..., p/2) exchange ever larger windows.
//
//   p=4, blocks b0..b3:  RS d=2: 0,1 keep b0b1; 2,3 keep b2b3   RS d=1: rank i keeps b_i
//                        AG d=1: 0,1 hold b0b1; 2,3 hold b2b3   AG d=2: all hold b0..b3
//
// Cost: 2 log2 p alpha + 2 (p-1)/p n beta + (p-1)/p n gamma (+ 2 alpha + n beta + n gamma
// when P is not a power of two). Any P.
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
  if (r < 2 * fold.rem) {
    TaskId got = s.recv(r - 1, 0, scratch(), n, prev);
    prev = {s.reduce(output(), output(), scratch(), p.count, {got})};
  }
  // Reduce-scatter by recursive halving over the window [lo, hi) of blocks.
  int lo = 0, hi = fold.pow2;
  Deps sends;
  for (int j = 0; j < rounds; ++j) {
    const int d = fold.pow2 >> (j + 1);
    const int partner = fold.realRank(nr ^ d);
    const int mid = lo + (hi - lo) / 2;
    const bool keepLow = (nr & d) == 0;
    const int keepLo = keepLow ? lo : mid, keepHi = keepLow ? mid : hi;
    const int giveLo = keepLow ? mid : lo, giveHi = keepLow ? hi : mid;
    const std::uint64_t keepOff = blocks.rangeOffset(keepLo) * es;
    const std::uint64_t keepN = blocks.rangeSize(keepLo, keepHi);
    const std::uint64_t giveOff = blocks.rangeOffset(giveLo) * es;
    const std::uint64_t giveN = blocks.rangeSize(giveLo, giveHi);
    const std::uint32_t step = static_cast<std::uint32_t>(j + 1);
    TaskId sent = s.send(partner, step, output(giveOff), giveN * es, prev);
    sends.push_back(sent);
    TaskId got = s.recv(partner, step, scratch(keepOff), keepN * es, prev);
    prev = {s.reduce(output(keepOff), output(keepOff), scratch(keepOff), keepN, {got})};
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
    const int partner = fold.realRank(nr ^ d);
    const int myLo = (nr / d) * d;
    const int theirLo = ((nr ^ d) / d) * d;
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

}  // namespace collx::algorithms
