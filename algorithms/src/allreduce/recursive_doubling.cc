// allreduce recursive_doubling: log2(P) rounds in which partners exchange the whole vector
// and both reduce it; for small messages, where latency, not bandwidth, decides.
//
// Round i (mask = 2^i): rank nr exchanges with nr ^ mask. P not a power of two: the first
// 2*rem ranks (rem = P - p, p the largest power of two <= P) fold in first (even r sends its
// vector to r+1, which reduces it) and get the result back at the end.
//
//   P=4:  round 0: 0<->1, 2<->3   round 1: 0<->2, 1<->3   -> everyone holds the sum
//
// Cost: log2 p (alpha + n beta + n gamma), + 2 alpha + 2 n beta + n gamma when P != p (fold
// in and out; the critical path then has log2 p + 1 or + 2 messages, as the main-phase ranks
// that did not fold start at once). Every rank combines the same pairs of values (a+b on
// one side, b+a on the other: commutative ops give the same bits), so results are
// bit-identical across ranks. Any P.
//
// Exactly, per rank (costAllreduceRecursiveDoubling): a main-phase rank sends, receives and
// reduces the whole vector once per round, log2 p times, once more when it is the odd rank
// of a folded pair; the even rank of a pair sends and receives it once and reduces nothing.
#include "../builders.h"
#include "../patterns.h"

namespace collx::algorithms {

Cost costAllreduceRecursiveDoubling(const ScheduleParams& p) {
  const int P = p.size;
  if (P == 1) return {};
  const std::uint64_t n = p.count, bytes = p.bytes();
  const patterns::Fold fold(P);
  if (fold.newRank(p.rank) < 0) return Cost{1, bytes, 1, bytes, 0};
  const std::uint64_t rounds =
      static_cast<std::uint64_t>(patterns::log2Exact(fold.pow2)) + (p.rank < 2 * fold.rem ? 1 : 0);
  return Cost{rounds, rounds * bytes, rounds, rounds * bytes, rounds * n};
}

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
  if (r < 2 * fold.rem) {  // odd rank of a folded pair: reduce the partner's vector first
    TaskId got = s.recv(r - 1, 0, scratch(), n, prev);
    prev = {s.reduce(output(), output(), scratch(), p.count, {got})};
  }
  for (int i = 0; i < rounds; ++i) {
    const int partner = fold.realRank(nr ^ (1 << i));
    const std::uint32_t step = static_cast<std::uint32_t>(i + 1);
    TaskId sent = s.send(partner, step, output(), n, prev);
    TaskId got = s.recv(partner, step, scratch(), n, prev);
    // The reduction overwrites what the send reads: it waits for both.
    prev = {s.reduce(output(), output(), scratch(), p.count, {sent, got})};
  }
  if (p.op == ReduceOpKind::kAvg) prev = {s.divide(output(), p.count, prev)};
  if (r < 2 * fold.rem) s.send(r - 1, postStep, output(), n, prev);
  return s;
}

}  // namespace collx::algorithms
