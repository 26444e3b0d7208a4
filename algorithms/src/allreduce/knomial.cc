// allreduce knomial: recursive multiplying with radix k = 4 (recursive doubling with groups
// of 4 instead of pairs; UCC's knomial allreduce): in each round a rank exchanges its whole
// vector with the other members of its group and combines all of them. For small and
// medium messages: ceil(log4 p) rounds instead of log2 p (p: the ranks left after the fold
// below), each with 3 messages in flight.
//
// Shape: m = c * 4^a <= P is the largest multiple of a power of four with c < 4 (P = 15:
// 12 = 3 * 4; P = 8: 8 = 2 * 4); new ranks 0..m-1 are written in mixed radix, digits
// 0..a-1 in base 4 (least significant first) and a last digit in base c (when c > 1).
// Steps:
// 1. Fold (rem = P - m < 4^a <= m): the pairs (2i, 2i+1), i < rem, combine first (2i sends
//    its vector, 2i+1 reduces 2i op 2i+1); new rank i stands for them (i < rem) or for rank
//    i + rem.
// 2. Round j (steps 1..rounds): the group of new rank nr is the ranks that differ from it
//    in digit j only (radix R = 4, or c for the last digit). Every member sends its vector to
//    the R - 1 others and combines the R vectors in member order, v0 op v1 op ... op v(R-1).
// 3. avg: divide by P. 4. Fold back: 2i+1 sends the result to 2i (step rounds + 1).
//
//   P=16: round 1 groups {0,1,2,3} {4,5,6,7} ...; round 2 groups {0,4,8,12} {1,5,9,13} ...
//   P=8:  round 1 groups {0,1,2,3} {4,5,6,7}; round 2 pairs {0,4} {1,5} {2,6} {3,7}
//
// Rank order: digits are taken least significant first, so after round j a partial covers
// an aligned range of ranks, and the members' partials are combined in member order (the
// fold in rank order too): non-commutative ops are exact. Every member of a group computes
// the same expression in the same order, so results are bit-identical on every rank.
//
// Cost: rounds (alpha + 3 n beta + 3 n gamma) for radix-4 rounds, as in the model where
// a rank's R - 1 messages of a round overlap: ceil(log4 p) alpha against log2 p for
// recursive doubling, 3 n beta per round against n (where a rank sends one message at a
// time, as collx-sim models it, a round costs 3 alpha). Exactly: R - 1 sends and receives of n
// bytes and (R - 1) * count reduced elements per round; the folded pairs add one message of
// n each way (and count reduced elements at 2i+1). Scratch: 3 n. Any P; no fallback.
#include "../builders.h"
#include "../patterns.h"

namespace collx::algorithms {

namespace {

constexpr int kRadix = 4;

struct Shape {
  explicit Shape(int P) : size(P) {
    int weight = 1;
    while (weight * kRadix <= P) {
      radices.push_back(kRadix);
      weights.push_back(weight);
      weight *= kRadix;
    }
    const int c = P / weight;
    if (c > 1) {
      radices.push_back(c);
      weights.push_back(weight);
    }
    main = c * weight;
    rem = P - main;
  }
  int newRank(int rank) const {
    if (rank < 2 * rem) return rank % 2 == 1 ? rank / 2 : -1;
    return rank - rem;
  }
  int realRank(int newRank) const { return newRank < rem ? 2 * newRank + 1 : newRank + rem; }
  int rounds() const { return static_cast<int>(radices.size()); }
  int size;
  int main = 1;
  int rem = 0;
  std::vector<int> radices;
  std::vector<int> weights;
};

}  // namespace

Schedule buildAllreduceKnomial(const ScheduleParams& p) {
  const int P = p.size, r = p.rank;
  if (P == 1) return buildLocalOnly(p, "knomial");
  const std::uint64_t n = p.bytes();
  const Shape shape(P);
  const int nr = shape.newRank(r);
  const auto postStep = static_cast<std::uint32_t>(shape.rounds() + 1);
  Schedule s("knomial");
  Deps prev;
  if (!p.inPlace && n > 0) prev.push_back(s.copy(output(), input(), n));
  if (nr < 0) {  // folds in: hand the vector to r+1, take the result back at the end
    TaskId sent = s.send(r + 1, 0, output(), n, prev);
    s.recv(r + 1, postStep, output(), n, {sent});
    return s;
  }
  s.setScratchBytes(static_cast<std::uint64_t>(kRadix - 1) * n);
  if (r < 2 * shape.rem) {  // (2i) op (2i+1)
    TaskId got = s.recv(r - 1, 0, scratch(), n, prev);
    prev = {s.reduce(output(), scratch(), output(), p.count, {got})};
  }
  for (int j = 0; j < shape.rounds(); ++j) {
    const int R = shape.radices[j], W = shape.weights[j];
    const int digit = nr / W % R, base = nr - digit * W;
    const auto step = static_cast<std::uint32_t>(j + 1);
    // Member t's vector lands in slot t (t < digit) or t - 1 (t > digit).
    auto slot = [&](int t) {
      return scratch(static_cast<std::uint64_t>(t < digit ? t : t - 1) * n);
    };
    Deps sends;
    std::vector<TaskId> got(R);
    for (int t = 0; t < R; ++t) {
      if (t == digit) continue;
      const int peer = shape.realRank(base + t * W);
      got[t] = s.recv(peer, step, slot(t), n, prev);
      sends.push_back(s.send(peer, step, output(), n, prev));
    }
    // v0 op v1 op ... op v(R-1), left to right; this rank's own vector is v(digit).
    TaskId last = 0;
    for (int t = 1; t < digit; ++t) {  // the members below this rank, in slot 0
      Deps deps = {got[t]};
      deps.push_back(t == 1 ? got[0] : last);
      last = s.reduce(slot(0), slot(0), slot(t), p.count, deps);
    }
    if (digit > 0) {
      Deps deps = sends;
      deps.push_back(digit == 1 ? got[0] : last);
      last = s.reduce(output(), slot(0), output(), p.count, deps);
    }
    for (int t = digit + 1; t < R; ++t) {
      Deps deps = {got[t]};
      if (t == digit + 1 && digit == 0) {
        deps.insert(deps.end(), sends.begin(), sends.end());
      } else {
        deps.push_back(last);
      }
      last = s.reduce(output(), output(), slot(t), p.count, deps);
    }
    prev = {last};
  }
  if (p.op == ReduceOpKind::kAvg) prev = {s.divide(output(), p.count, prev)};
  if (r < 2 * shape.rem) s.send(r - 1, postStep, output(), n, prev);
  return s;
}

Cost costAllreduceKnomial(const ScheduleParams& p) {
  const int P = p.size, r = p.rank;
  if (P == 1) return Cost{};
  const std::uint64_t n = p.bytes();
  const Shape shape(P);
  if (shape.newRank(r) < 0) return Cost{1, n, 1, n, 0};
  std::uint64_t messages = r < 2 * shape.rem ? 1 : 0;  // the fold, each way
  for (int R : shape.radices) messages += static_cast<std::uint64_t>(R - 1);
  return Cost{messages, messages * n, messages, messages * n, messages * p.count};
}

const AlgorithmInfo kAllreduceKnomial{
    .coll = Collective::kAllreduce,
    .name = "knomial",
    .summary =
        "recursive multiplying, radix 4: groups of 4 exchange whole vectors; ceil(log4 P) "
        "steps of 3 messages, 3n bytes per step; small messages; keeps rank order",
    .build = buildAllreduceKnomial,
    .cost = costAllreduceKnomial,
    .keepsOrder = true,
    .doc = {
        .rounds = "ceil(log4 p); up to ceil(log4 p) + 2 when P != m",
        .perRank = "3 messages of n per radix-4 round (c-1 in a last round of radix c), +1 for a "
                   "folded pair",
        .cost = "ceil(log4 p) rounds of 3 (alpha + n beta + n gamma) (c-1 instead of 3 in a round "
                "of radix c), + 2 alpha + 2 n beta + n gamma when P != m; ceil(log4 p) alpha where "
                "a round's messages overlap (the file's figure)",
        .restrictions = "any P, any count; for small n (it moves about 3 n ceil(log4 p) bytes)"}};

}  // namespace collx::algorithms
