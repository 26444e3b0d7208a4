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
// Cost: 2 log2 p alpha + 2 (p-1)/p n beta + (p-1)/p n gamma (+ 2 alpha + 2 n beta + n gamma
// when P is not a power of two: the vector folds in and the result folds out). Any P.
//
// Exactly, per rank (costAllreduceHalvingDoubling), with b_i the size of block i and W_d the
// d blocks aligned on d that hold block nr: every round is one message each way, empty or
// not, so a main-phase rank sends and receives 2 log2 p messages. The windows it gives away
// in the reduce-scatter and receives in the allgather are the siblings of W_p/2 .. W_1, which
// tile everything but block nr: n - b_nr elements each way. It receives and reduces W_p/2 ..
// W_1 in the reduce-scatter and sends the same windows in the allgather: sum_d |W_d|
// elements each way ((p-1) n / p when the blocks are equal). Folding adds one message of n
// bytes each way and n reduced elements to the odd rank of a pair; the even rank only sends
// its vector and gets the result back.
#include <algorithm>

#include "../builders.h"
#include "../patterns.h"

namespace collx::algorithms {

Cost costAllreduceHalvingDoubling(const ScheduleParams& p) {
  const int P = p.size;
  if (P == 1) return {};
  const std::uint64_t es = p.elementSize, n = p.count;
  const patterns::Fold fold(P);
  const int nr = fold.newRank(p.rank);
  Cost c;
  if (nr < 0) return Cost{1, n * es, 1, n * es, 0};
  const std::uint64_t rounds = static_cast<std::uint64_t>(patterns::log2Exact(fold.pow2));
  const patterns::Blocks blocks{n, fold.pow2};
  std::uint64_t windows = 0;  // sum over d = 1, 2, .., p/2 of |W_d|
  for (int d = 1; d < fold.pow2; d *= 2) {
    const int lo = nr / d * d;
    windows += blocks.rangeSize(lo, lo + d);
  }
  const std::uint64_t elements = n - blocks.size(nr) + windows;
  c.sends = c.recvs = 2 * rounds;
  c.sendBytes = c.recvBytes = elements * es;
  c.reducedElements = windows;
  if (p.rank < 2 * fold.rem) {  // the odd rank of a folded pair
    c.sends += 1;
    c.recvs += 1;
    c.sendBytes += n * es;
    c.recvBytes += n * es;
    c.reducedElements += n;
  }
  return c;
}

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
