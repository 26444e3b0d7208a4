// broadcast scatter_allgather (van de Geijn): a binomial scatter of P blocks, then a ring
// allgather of those blocks. For large buffers: every rank sends and receives about n bytes
// (not n log2 P as in the binomial tree), at the price of about P steps.
//
// The buffer is split into P blocks (Blocks{count, P}); block u belongs to the relative rank
// u = (rank - root) mod P. Steps:
// 1. Scatter (step 0): the binomial tree of patterns::BinomialTree; the subtree of u spans
//    the relative ranks [u, u + span(u)), whose blocks are contiguous in the buffer, so
//    every message goes straight from and into place: u receives its subtree's blocks from
//    its parent and sends each child its part (farthest child first).
// 2. Ring allgather (steps 1..P-1): at ring step s, relative rank u sends block u - s to
//    u + 1 and receives block u - 1 - s from u - 1, skipping the blocks the receiver
//    already holds from the scatter (its subtree; everything at the root). A block is
//    sent at step s only after it arrived at step s - 1 (or with the scatter).
//
//   P=4, root 0 (blocks b0..b3; the scatter gives 0: all, 1: b1, 2: b2 b3, 3: b3):
//   ring step   0->1   1->2   2->3   3->0
//   0           -      b1     -      -       (2 has b2 b3 already, 3 has b3, 0 all)
//   1           b0     -      b1     -
//   2           b3     b0     -      -       afterwards every rank holds b0..b3
//
// Cost: (log2 P + P - 1) alpha + about 2 n beta per rank (n (P-1)/P in the scatter at the
// root, at most n (P-1)/P in the ring). Exactly: a non-root receives one scatter message of
// its subtree's blocks; each rank sends one scatter message per child; ring step s sends
// block u - s unless u + 1 holds it and receives block u - 1 - s unless u holds it.
//
// Restriction: count >= P, so that every block is non-empty; with fewer elements the ring's
// P - 1 steps would mostly move empty blocks, and the broadcast falls back to binomial.
// Any P, any root.
#include <algorithm>

#include "../builders.h"
#include "../patterns.h"
#include "collx/base/log.h"

namespace collx::algorithms {

namespace {

// Whether relative rank u holds block b after the scatter.
bool holds(const patterns::BinomialTree& tree, int u, int b) {
  return b >= u && b < u + tree.span(u);
}

bool fallsBack(const ScheduleParams& p) { return p.count < static_cast<std::uint64_t>(p.size); }

}  // namespace

Schedule buildBroadcastScatterAllgather(const ScheduleParams& p) {
  const int P = p.size;
  if (P == 1) return Schedule("scatter_allgather");
  if (fallsBack(p)) {
    COLLX_DEBUG(kAlgo,
                "rank {}: broadcast scatter_allgather: {} elements for {} ranks leave blocks "
                "empty; binomial instead",
                p.rank, p.count, P);
    return buildBroadcastBinomial(p);
  }
  Schedule s("scatter_allgather");
  const std::uint64_t es = p.elementSize;
  const patterns::BinomialTree tree{P};
  const patterns::Blocks blocks{p.count, P};
  const int u = patterns::mod(p.rank - p.root, P);
  auto real = [&](int x) { return patterns::mod(x + p.root, P); };
  auto range = [&](int first, int last) {
    return std::pair{output(blocks.rangeOffset(first) * es), blocks.rangeSize(first, last) * es};
  };
  // Scatter.
  Deps scattered;
  if (u != 0) {
    auto [at, bytes] = range(u, u + tree.span(u));
    scattered.push_back(s.recv(real(tree.parent(u)), 0, at, bytes));
  }
  const std::vector<int> children = tree.children(u);
  for (auto c = children.rbegin(); c != children.rend(); ++c) {
    auto [at, bytes] = range(*c, *c + tree.span(*c));
    s.send(real(*c), 0, at, bytes, scattered);
  }
  // Ring allgather.
  const int right = patterns::mod(p.rank + 1, P), left = patterns::mod(p.rank - 1, P);
  const int next = patterns::mod(u + 1, P);
  std::vector<Deps> arrived(P, scattered);  // what must end before block b can be sent
  for (int step = 0; step + 1 < P; ++step) {
    const int in = patterns::mod(u - 1 - step, P);
    const int out = patterns::mod(u - step, P);
    const auto tag = static_cast<std::uint32_t>(step + 1);
    if (!holds(tree, u, in)) {
      auto [at, bytes] = range(in, in + 1);
      arrived[in] = {s.recv(left, tag, at, bytes)};
    }
    if (!holds(tree, next, out)) {
      auto [at, bytes] = range(out, out + 1);
      s.send(right, tag, at, bytes, arrived[out]);
    }
  }
  return s;
}

Cost costBroadcastScatterAllgather(const ScheduleParams& p) {
  const int P = p.size;
  if (P == 1) return Cost{};
  if (fallsBack(p)) return costBroadcastBinomial(p);
  const std::uint64_t es = p.elementSize;
  const patterns::BinomialTree tree{P};
  const patterns::Blocks blocks{p.count, P};
  const int u = patterns::mod(p.rank - p.root, P);
  Cost c;
  if (u != 0) {
    c.recvs += 1;
    c.recvBytes += blocks.rangeSize(u, u + tree.span(u)) * es;
  }
  for (int child : tree.children(u)) {
    c.sends += 1;
    c.sendBytes += blocks.rangeSize(child, child + tree.span(child)) * es;
  }
  const int next = patterns::mod(u + 1, P);
  for (int step = 0; step + 1 < P; ++step) {
    const int in = patterns::mod(u - 1 - step, P), out = patterns::mod(u - step, P);
    if (!holds(tree, u, in)) {
      c.recvs += 1;
      c.recvBytes += blocks.size(in) * es;
    }
    if (!holds(tree, next, out)) {
      c.sends += 1;
      c.sendBytes += blocks.size(out) * es;
    }
  }
  return c;
}

const AlgorithmInfo kBroadcastScatterAllgather{
    .coll = Collective::kBroadcast,
    .name = "scatter_allgather",
    .summary =
        "van de Geijn: binomial scatter of P blocks + ring allgather; log P + P-1 steps, about "
        "2n bytes per rank; large buffers (binomial below P elements)",
    .build = buildBroadcastScatterAllgather,
    .cost = costBroadcastScatterAllgather,
    .doc = {
        .rounds = "P-1",
        .perRank = "the root: ceil(log2 P) scatter and P-1 ring messages, 2(P-1)/P n bytes",
        .cost = "(ceil(log2 P) + P-1) alpha + 2(P-1)/P n beta at the root",
        .restrictions =
            "count >= P (no empty block), else binomial's schedule; any P, any root; for large n"}};

}  // namespace collx::algorithms
