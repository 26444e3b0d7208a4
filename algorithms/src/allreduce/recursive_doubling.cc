// allreduce recursive_doubling: log2(P) rounds in which partners exchange the whole vector
// and both reduce it; for small messages, where latency, not bandwidth, decides.
//
// Round i (mask = 2^i): rank nr exchanges with nr ^ mask. P not a power of two: the first
// 2*rem ranks (rem = P - p, p the largest power of two <= P) fold in first (even r sends its
// vector to r+1, which reduces it) and get the result back at the end.
//
//   P=4:  round 0: 0<->1, 2<->3   round 1: 0<->2, 1<->3   -> everyone holds the sum
//
// Rank order: round i pairs ranks 2^i apart, so each partial covers a contiguous range of
// ranks; the partner's partial is the left operand when its ranks are lower (the fold too:
// 2i op 2i+1). Both partners thus compute the same (lower) op (higher): non-commutative ops
// are exact and results are bit-identical across ranks.
//
// Cost: log2 p (alpha + n beta + n gamma) (+ 2 alpha + 2 n beta + n gamma when P is not a
// power of two: the vector folds in and the result folds out). Exactly, for a rank
// in the main phase: log2 p sends and receives of n bytes and log2 p * count reduced
// elements; the folded pairs add one message of n each way (and count reduced elements at
// 2i+1). Any P.
#include "../builders.h"
#include "../patterns.h"

namespace collx::algorithms {

Schedule buildAllreduceRecursiveDoubling(const ScheduleParams& p) {
  const int P = p.size;
  if (P == 1) return buildLocalOnly(p, "recursive_doubling");
  const int r = p.rank;
  const std::uint64_t n = p.bytes();
  const patterns::Fold fold(P);
  const int nr = fold.newRank(r);
  const int rounds = patterns::log2Exact(fold.pow2);
  const std::uint32_t postStep = static_cast<std::uint32_t>(rounds + 1);
  Schedule s("recursive_doubling");
  s.setScratchBytes(n);
  Deps prev;
  if (!p.inPlace && n > 0) prev.push_back(s.copy(output(), input(), n));

  if (nr < 0) {  // folds in: hand the vector to r+1, take the result back at the end
    TaskId sent = s.send(r + 1, 0, output(), n, prev);
    s.recv(r + 1, postStep, output(), n, {sent});
    return s;
  }
  if (r < 2 * fold.rem) {  // odd rank of a folded pair: (2i) op (2i+1) first
    TaskId got = s.recv(r - 1, 0, scratch(), n, prev);
    prev = {s.reduce(output(), scratch(), output(), p.count, {got})};
  }
  for (int i = 0; i < rounds; ++i) {
    const int partner = fold.realRank(nr ^ (1 << i));
    const std::uint32_t step = static_cast<std::uint32_t>(i + 1);
    TaskId sent = s.send(partner, step, output(), n, prev);
    TaskId got = s.recv(partner, step, scratch(), n, prev);
    // The reduction overwrites what the send reads: it waits for both.
    prev = {partner < r ? s.reduce(output(), scratch(), output(), p.count, {sent, got})
                        : s.reduce(output(), output(), scratch(), p.count, {sent, got})};
  }
  if (p.op == ReduceOpKind::kAvg) prev = {s.divide(output(), p.count, prev)};
  if (r < 2 * fold.rem) s.send(r - 1, postStep, output(), n, prev);
  return s;
}

Cost costAllreduceRecursiveDoubling(const ScheduleParams& p) {
  const int P = p.size, r = p.rank;
  if (P == 1) return Cost{};
  const std::uint64_t n = p.bytes();
  const patterns::Fold fold(P);
  if (fold.newRank(r) < 0) return Cost{1, n, 1, n, 0};
  const std::uint64_t rounds = static_cast<std::uint64_t>(patterns::log2Exact(fold.pow2));
  const std::uint64_t folds = r < 2 * fold.rem ? 1 : 0;
  return Cost{rounds + folds, (rounds + folds) * n, rounds + folds, (rounds + folds) * n,
              (rounds + folds) * p.count};
}

const AlgorithmInfo kAllreduceRecursiveDoubling{
    .coll = Collective::kAllreduce,
    .name = "recursive_doubling",
    .summary =
        "partners exchange the whole vector in log P rounds; log P steps, n log P bytes; "
        "for small messages; keeps rank order",
    .build = buildAllreduceRecursiveDoubling,
    .cost = costAllreduceRecursiveDoubling,
    .keepsOrder = true,
    .doc = {.rounds = "log2 p; up to log2 p + 2 when P != p",
            .perRank = "log2 p messages of n bytes, +1 for a folded pair",
            .cost = "log2 p (alpha + n beta + n gamma), + 2 alpha + 2 n beta + n gamma when P != p",
            .restrictions = "any P; for small n (it moves n log2 p bytes)"}};

}  // namespace collx::algorithms
