// reduce binomial: the mirror of the binomial broadcast. With v = (rank - root) mod P, rank v
// receives the partial results of its children v + 2^k (for every 2^k below v's lowest set
// bit), combines them with its own, and sends the result to its parent (v with its lowest
// set bit cleared); the root ends with the reduction. Pieces of at most chunkBytes pipeline
// the tree.
//
//   P=8, root 0:   7 -> 6;  6 -> 4;  5 -> 4;  4 -> 0;  3 -> 2;  2 -> 0;  1 -> 0
//
// Cost: ceil(log2 P) (alpha + n beta + n gamma) at the root without pipelining. Keeps rank
// order: a child's subtree holds the ranks just above its parent's, so every combination is
// (lower ranks) op (higher ranks) when the tree is rooted at rank 0. For a non-commutative
// op with another root, the tree is rooted at rank 0 and the result then moves to the root.
//
// Counts (costReduceBinomial), k = the pieces of n (1 when n is 0: empty messages still
// flow): a rank with c children receives c k messages (c n bytes) and reduces c times the
// vector; every rank but the tree's root sends k messages (n bytes) to its parent; with the
// detour through rank 0, rank 0 sends k more and the root receives k more.
#include <algorithm>

#include "../builders.h"
#include "../patterns.h"

namespace collx::algorithms {

Cost costReduceBinomial(const ScheduleParams& p) {
  const int P = p.size;
  if (P == 1) return {};
  const std::uint64_t n = p.bytes();
  const bool viaZero = !p.commutative && p.root != 0;
  const int treeRoot = viaZero ? 0 : p.root;
  const std::uint64_t piece =
      std::max<std::uint64_t>(p.elementSize, p.chunkBytes / p.elementSize * p.elementSize);
  const std::uint64_t k = n == 0 ? 1 : patterns::piecesOf(n, piece);
  const int v = patterns::mod(p.rank - treeRoot, P);
  const auto children = static_cast<std::uint64_t>(patterns::binomialChildren(v, P));
  const std::uint64_t ups = (v != 0 ? 1 : 0) + (viaZero && v == 0 ? 1 : 0);
  const std::uint64_t downs = children + (viaZero && p.rank == p.root ? 1 : 0);
  return Cost{ups * k, ups * n, downs * k, downs * n, children * p.count};
}

Schedule buildReduceBinomial(const ScheduleParams& p) {
  Schedule s("binomial");
  const int P = p.size;
  const std::uint64_t n = p.bytes();
  const bool viaZero = !p.commutative && p.root != 0;
  const int treeRoot = viaZero ? 0 : p.root;
  const bool isRoot = p.rank == p.root;
  if (P == 1) {
    if (!p.inPlace && n > 0) s.copy(output(), input(), n);
    if (p.op == ReduceOpKind::kAvg && p.count > 0) s.divide(output(), p.count);
    return s;
  }
  const int v = patterns::mod(p.rank - treeRoot, P);
  int parent = -1, mask = 1;
  while (mask < P) {
    if (v & mask) {
      parent = patterns::mod(v - mask + treeRoot, P);
      break;
    }
    mask <<= 1;
  }
  std::vector<int> children;  // nearest subtree first: in rank order above this rank
  for (int m = 1; m < mask && v + m < P; m <<= 1) {
    children.push_back(patterns::mod(v + m + treeRoot, P));
  }
  // The accumulator: the output at the tree's root (when it is the real root), else scratch.
  const bool accumulateInOutput = p.rank == treeRoot && isRoot;
  const std::uint64_t accOffset = 0;
  const std::uint64_t recvOffset = accumulateInOutput ? 0 : n;
  s.setScratchBytes(accumulateInOutput ? n : 2 * n);
  auto acc = [&](std::uint64_t off) {
    return accumulateInOutput ? output(off) : scratch(accOffset + off);
  };
  const std::uint64_t piece =
      std::max<std::uint64_t>(p.elementSize, p.chunkBytes / p.elementSize * p.elementSize);
  const std::uint64_t K = n == 0 ? 1 : (n + piece - 1) / piece;
  const std::uint32_t finalStep = static_cast<std::uint32_t>(K);  // the hop from 0 to the root
  std::vector<Deps> readsOutput(K);  // tasks that read the root's output before the last hop
  for (std::uint64_t k = 0; k < K; ++k) {
    const std::uint64_t off = k * piece;
    const std::uint64_t len = n == 0 ? 0 : std::min(piece, n - off);
    const std::uint64_t elems = len / p.elementSize;
    const auto step = static_cast<std::uint32_t>(k);
    // Start from this rank's own contribution.
    Deps prev;
    BufferRef mine = p.inPlace ? output(off) : input(off);
    if (children.empty()) {
      if (parent >= 0) readsOutput[k].push_back(s.send(parent, step, mine, len));
      continue;
    }
    bool first = true;
    for (int child : children) {
      TaskId got = s.recv(child, step, scratch(recvOffset + off), len, prev);
      // (lower ranks) op (higher ranks): this rank's partial covers the lower ones.
      BufferRef a = first ? mine : acc(off);
      prev = {s.reduce(acc(off), a, scratch(recvOffset + off), elems, {got})};
      first = false;
    }
    readsOutput[k].insert(readsOutput[k].end(), prev.begin(), prev.end());
    if (parent >= 0) {
      readsOutput[k].push_back(s.send(parent, step, acc(off), len, prev));
    } else if (viaZero) {
      s.send(p.root, finalStep + static_cast<std::uint32_t>(k), acc(off), len, prev);
    } else if (p.op == ReduceOpKind::kAvg && elems > 0) {
      s.divide(output(off), elems, prev);
    }
  }
  if (viaZero && isRoot) {
    for (std::uint64_t k = 0; k < K; ++k) {
      const std::uint64_t off = k * piece;
      const std::uint64_t len = n == 0 ? 0 : std::min(piece, n - off);
      // In place, the root's own contribution was read from the output: not overwritten
      // before those reads are done.
      TaskId got = s.recv(treeRoot, finalStep + static_cast<std::uint32_t>(k), output(off), len,
                          readsOutput[k]);
      if (p.op == ReduceOpKind::kAvg && len > 0) s.divide(output(off), len / p.elementSize, {got});
    }
  }
  return s;
}

const AlgorithmInfo kReduceBinomial{
    .coll = Collective::kReduce,
    .name = "binomial",
    .summary = "binomial tree towards the root, pipelined in chunks; keeps rank order",
    .build = buildReduceBinomial,
    .cost = costReduceBinomial,
    .keepsOrder = true,
    .doc = {.rounds = "floor(log2 P), +1 for a non-commutative op with root != 0",
            .perRank = "k messages of n to its parent; the root receives ceil(log2 P) k messages",
            .cost = "ceil(log2 P) (alpha + n beta + n gamma) at the root",
            .restrictions = "any P, any root",
            .orderNote = " (tree rooted at rank 0, result moved to the root)"}};

}  // namespace collx::algorithms
