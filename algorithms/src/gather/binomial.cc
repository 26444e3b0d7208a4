// gather / gatherv binomial: the blocks climb a binomial tree rooted at the root, each rank
// sending its whole subtree's blocks to its parent in one message (MPICH's binomial gather,
// with per-rank counts).
//
// With v = (rank - root) mod P, the subtree of v spans the relative ranks [v, v + span(v))
// (patterns::BinomialTree), so a rank packs its subtree in relative-rank order: its own
// block first, then each child's subtree as that child sent it. Steps: every rank posts a
// receive per child (children v+1, v+2, v+4, ... each with its subtree), then sends the lot
// to its parent; a leaf sends its input straight away. The root receives a child's subtree
// straight into the output when those blocks lie back to back there in relative-rank order
// (always for gather, unless the subtree wraps past rank P-1), else into scratch, and copies
// the blocks to their displacements.
//
//   P=8, root 0:   1 -> 0;  3 -> 2 -> 0;  5 -> 4, 7 -> 6 -> 4 -> 0   (4 sends [b4..b7])
//
// Cost: ceil(log2 P) alpha + (n - n_root) beta at the root against (P-1) alpha for linear;
// the blocks of a subtree cross log2 of its size links (n/2 log2 P beta in all, spread over
// the ranks). Exactly: a rank receives one message per child (the child's subtree) and,
// unless it is the root, sends one message of its subtree's bytes.
//
// Restriction: a rank with children must know the counts of its subtree. gather passes
// them everywhere; gatherv only at the root unless the caller also gives recvcounts at the
// other ranks (collectives.h). There is no fallback: a schedule must agree with its peers'
// on every message, and another algorithm on one rank would not, so a rank with children
// and no counts refuses the call (InvalidArgument). Any P, any root.
#include <algorithm>
#include <numeric>

#include "../builders.h"
#include "../patterns.h"
#include "collx/base/error.h"

namespace collx::algorithms {

namespace {

constexpr const char* kName = "binomial";

// This rank's view of the per-rank counts: counts when present, else this rank's own
// count for itself (enough for a leaf); nullopt-like empty result when a subtree needs more.
std::vector<std::uint64_t> countsOf(const ScheduleParams& p) {
  if (static_cast<int>(p.counts.size()) == p.size) return p.counts;
  if (p.coll == Collective::kGather || p.coll == Collective::kScatter) {
    return std::vector<std::uint64_t>(static_cast<std::size_t>(p.size), p.count);
  }
  return {};
}

}  // namespace

// Shared with scatter/binomial.cc: the per-rank counts this rank needs, or an error naming
// what is missing.
std::vector<std::uint64_t> binomialCounts(const ScheduleParams& p, const char* which) {
  const patterns::BinomialTree tree{p.size};
  const int v = patterns::mod(p.rank - p.root, p.size);
  std::vector<std::uint64_t> counts = countsOf(p);
  if (counts.empty()) {
    if (tree.children(v).empty()) {  // a leaf only needs its own count
      counts.assign(static_cast<std::size_t>(p.size), 0);
      counts[p.rank] = p.count;
      return counts;
    }
    throw InvalidArgument(Where{p.rank, collectiveName(p.coll), -1},
                          std::string("the binomial algorithm needs ") + which +
                              " on every rank: rank " + std::to_string(p.rank) +
                              " forwards the blocks of " + std::to_string(tree.span(v) - 1) +
                              " other ranks (pass them here too, or use the linear algorithm)");
  }
  if (p.rank != p.root && counts[p.rank] != p.count) {
    throw InvalidArgument(Where{p.rank, collectiveName(p.coll), -1},
                          "this rank's count " + std::to_string(p.count) + " differs from " +
                              which + "[" + std::to_string(p.rank) +
                              "] = " + std::to_string(counts[p.rank]));
  }
  return counts;
}

Schedule buildGatherBinomial(const ScheduleParams& p) {
  Schedule s(kName);
  const int P = p.size, r = p.rank;
  const std::uint64_t es = p.elementSize;
  const patterns::BinomialTree tree{P};
  const int v = patterns::mod(r - p.root, P);
  const std::vector<int> children = tree.children(v);
  const std::vector<std::uint64_t> counts = binomialCounts(p, "recvcounts");
  auto real = [&](int u) { return patterns::mod(u + p.root, P); };
  // Elements of the relative ranks [first, last).
  auto total = [&](int first, int last) {
    return patterns::relativeCount(counts, p.root, first, last);
  };
  if (v != 0) {
    const int parent = real(tree.parent(v));
    if (children.empty()) {
      s.send(parent, 0, input(), p.count * es);
      return s;
    }
    // Scratch: the subtree in relative-rank order, this rank's block first.
    s.setScratchBytes(total(v, v + tree.span(v)) * es);
    Deps parts;
    for (int c : children) {
      parts.push_back(
          s.recv(real(c), 0, scratch(total(v, c) * es), total(c, c + tree.span(c)) * es));
    }
    if (p.count > 0) parts.push_back(s.copy(scratch(), input(), p.count * es));
    s.send(parent, 0, scratch(), total(v, v + tree.span(v)) * es, parts);
    return s;
  }
  // The root: each child's subtree straight into place when it lies back to back there.
  std::uint64_t scratchAt = 0;
  std::vector<std::pair<int, std::uint64_t>> staged;  // (child, scratch offset in elements)
  for (int c : children) {
    const auto range = patterns::relativeRange(counts, p.displs, p.root, c, c + tree.span(c));
    if (range.contiguous) {
      s.recv(real(c), 0, output(range.displ * es), range.count * es);
    } else {
      staged.emplace_back(c, scratchAt);
      scratchAt += range.count;
    }
  }
  s.setScratchBytes(scratchAt * es);
  for (const auto& [c, at] : staged) {
    const int span = tree.span(c);
    TaskId got = s.recv(real(c), 0, scratch(at * es), total(c, c + span) * es);
    std::uint64_t offset = at;
    for (int u = c; u < c + span; ++u) {
      const int i = real(u);
      if (counts[i] > 0)
        s.copy(output(p.displs[i] * es), scratch(offset * es), counts[i] * es, {got});
      offset += counts[i];
    }
  }
  if (!p.inPlace && counts[r] > 0) s.copy(output(p.displs[r] * es), input(), counts[r] * es);
  return s;
}

Cost binomialTreeCost(const ScheduleParams& p, const char* which) {
  const int P = p.size;
  const patterns::BinomialTree tree{P};
  const int v = patterns::mod(p.rank - p.root, P);
  const std::vector<std::uint64_t> counts = binomialCounts(p, which);
  auto total = [&](int first, int last) {
    return patterns::relativeCount(counts, p.root, first, last) * p.elementSize;
  };
  Cost c;
  for (int child : tree.children(v)) {
    c.recvs += 1;
    c.recvBytes += total(child, child + tree.span(child));
  }
  if (v != 0) {
    c.sends = 1;
    c.sendBytes = total(v, v + tree.span(v));
  }
  return c;
}

Cost costGatherBinomial(const ScheduleParams& p) { return binomialTreeCost(p, "recvcounts"); }

const AlgorithmInfo kGatherBinomial{
    .coll = Collective::kGather,
    .name = "binomial",
    .summary =
        "subtrees climb a binomial tree in one message each: ceil(log2 P) messages at the root",
    .build = buildGatherBinomial,
    .cost = costGatherBinomial,
    .doc = {.rounds = "floor(log2 P)",
            .perRank = "one message of its subtree's blocks to its parent (up to P/2 blocks); the "
                       "root receives ceil(log2 P) messages, (P-1) n bytes",
            .cost = "ceil(log2 P) alpha + (P-1) n beta at the root",
            .restrictions = "any P, any root"}};

const AlgorithmInfo kGathervBinomial{
    .coll = Collective::kGatherv,
    .name = "binomial",
    .summary =
        "subtrees climb a binomial tree in one message each: ceil(log2 P) messages at the "
        "root; needs recvcounts on every rank",
    .build = buildGatherBinomial,
    .cost = costGatherBinomial,
    .doc = {.rounds = "floor(log2 P)",
            .perRank = "one message of its subtree's blocks to its parent; the root receives "
                       "ceil(log2 P) messages, N - n_root bytes",
            .cost = "ceil(log2 P) alpha + (N - n_root) beta at the root",
            .restrictions = "any P, any root, any counts; a rank with children needs recvcounts "
                            "(InvalidArgument otherwise, no fallback)"}};

}  // namespace collx::algorithms
