// scatter / scatterv binomial: the mirror of the binomial gather. The root sends each child
// the blocks of the child's whole subtree in one message; every rank keeps its own block and
// passes its children's subtrees on (MPICH's binomial scatter, with per-rank counts).
//
// With v = (rank - root) mod P, the subtree of v spans the relative ranks [v, v + span(v))
// (patterns::BinomialTree). The root sends its farthest child first (the largest subtree,
// which has the most forwarding left to do): straight from its buffer when that subtree's
// blocks lie back to back there in relative-rank order (always for scatter, unless the
// subtree wraps past rank P-1), else packed into scratch first. A rank with children
// receives its subtree into scratch (its own block first), copies its block out and sends
// each child its part; a leaf receives its block straight into the output.
//
//   P=8, root 0:   0 -> 4 [b4..b7], 0 -> 2 [b2 b3], 0 -> 1;  4 -> 6 [b6 b7], 4 -> 5;
//                  2 -> 3;  6 -> 7
//
// Cost: ceil(log2 P) alpha + (n - n_root) beta at the root against (P-1) alpha for linear.
// Exactly: a rank other than the root receives one message of its subtree's bytes, and
// every rank sends one message per child (the child's subtree).
//
// Restriction: a rank with children must know the counts of its subtree. scatter passes
// them everywhere; scatterv only at the root unless the caller also gives sendcounts at the
// other ranks (collectives.h). As for gatherv there is no sound fallback (every rank's
// schedule must agree with its peers'), so a rank with children and no counts refuses the
// call (InvalidArgument). Any P, any root.
#include <utility>

#include "../builders.h"
#include "../patterns.h"

namespace collx::algorithms {

Schedule buildScatterBinomial(const ScheduleParams& p) {
  Schedule s("binomial");
  const int P = p.size, r = p.rank;
  const std::uint64_t es = p.elementSize;
  const patterns::BinomialTree tree{P};
  const int v = patterns::mod(r - p.root, P);
  const std::vector<int> children = tree.children(v);
  const std::vector<std::uint64_t> counts = binomialCounts(p, "sendcounts");
  auto real = [&](int u) { return patterns::mod(u + p.root, P); };
  // Elements of the relative ranks [first, last).
  auto total = [&](int first, int last) {
    return patterns::relativeCount(counts, p.root, first, last);
  };
  if (v != 0) {
    const int parent = real(tree.parent(v));
    if (children.empty()) {
      s.recv(parent, 0, output(), p.count * es);
      return s;
    }
    s.setScratchBytes(total(v, v + tree.span(v)) * es);
    TaskId got = s.recv(parent, 0, scratch(), total(v, v + tree.span(v)) * es);
    for (auto c = children.rbegin(); c != children.rend(); ++c) {
      s.send(real(*c), 0, scratch(total(v, *c) * es), total(*c, *c + tree.span(*c)) * es, {got});
    }
    if (p.count > 0) s.copy(output(), scratch(), p.count * es, {got});
    return s;
  }
  // The root: farthest child first, from the buffer when the subtree lies back to back.
  std::uint64_t scratchBytes = 0;
  for (auto c = children.rbegin(); c != children.rend(); ++c) {
    const int span = tree.span(*c);
    const auto range = patterns::relativeRange(counts, p.displs, p.root, *c, *c + span);
    if (range.contiguous) {
      s.send(real(*c), 0, input(range.displ * es), range.count * es);
      continue;
    }
    Deps packed;
    std::uint64_t offset = scratchBytes;
    for (int u = *c; u < *c + span; ++u) {
      const int i = real(u);
      if (counts[i] > 0)
        packed.push_back(s.copy(scratch(offset), input(p.displs[i] * es), counts[i] * es));
      offset += counts[i] * es;
    }
    s.send(real(*c), 0, scratch(scratchBytes), range.count * es, packed);
    scratchBytes = offset;
  }
  s.setScratchBytes(scratchBytes);
  if (!p.inPlace && counts[r] > 0) s.copy(output(), input(p.displs[r] * es), counts[r] * es);
  return s;
}

Cost costScatterBinomial(const ScheduleParams& p) {
  // The gather's messages, each the other way.
  Cost c = binomialTreeCost(p, "sendcounts");
  std::swap(c.sends, c.recvs);
  std::swap(c.sendBytes, c.recvBytes);
  return c;
}

const AlgorithmInfo kScatterBinomial{
    .coll = Collective::kScatter,
    .name = "binomial",
    .summary =
        "subtrees go down a binomial tree in one message each: ceil(log2 P) messages at "
        "the root",
    .build = buildScatterBinomial,
    .cost = costScatterBinomial,
    .doc = {.rounds = "floor(log2 P)",
            .perRank = "one message per child (its subtree's blocks): the root sends ceil(log2 P) "
                       "messages, (P-1) n bytes",
            .cost = "ceil(log2 P) alpha + (P-1) n beta at the root",
            .restrictions = "any P, any root"}};

const AlgorithmInfo kScattervBinomial{
    .coll = Collective::kScatterv,
    .name = "binomial",
    .summary =
        "subtrees go down a binomial tree in one message each: ceil(log2 P) messages at the "
        "root; needs sendcounts on every rank",
    .build = buildScatterBinomial,
    .cost = costScatterBinomial,
    .doc = {.rounds = "floor(log2 P)",
            .perRank = "one message per child (its subtree's blocks): the root sends ceil(log2 P) "
                       "messages, N - n_root bytes",
            .cost = "ceil(log2 P) alpha + (N - n_root) beta at the root",
            .restrictions = "any P, any root, any counts; a rank with children needs sendcounts "
                            "(InvalidArgument otherwise, no fallback)"}};

}  // namespace collx::algorithms
