// broadcast binomial: a binomial tree rooted at the root; every rank receives once from its
// parent and forwards to its children, the buffer moved in pieces of at most chunkBytes so
// that a rank forwards a piece while the next one arrives.
//
// With v = (rank - root) mod P: the parent of v is v with its lowest set bit cleared; the
// children of v are v + 2^k for every 2^k below v's lowest set bit (all powers for the root).
//
//   P=8, root 0:   0 -> 4, 2, 1;   4 -> 6, 5;   2 -> 3;   6 -> 7
//
// Cost: ceil(log2 P) alpha + ceil(log2 P) n beta: the root sends the whole vector to each
// of its children in turn over one link, pieces or not. Pieces let a child forward while
// the root still sends, which shortens the critical path only where a rank's links to its
// children work in parallel. Exactly: K = ceil(n / piece) pieces (1 zero-byte piece
// for an empty buffer); a rank other than the root receives K messages (n bytes) and every
// rank sends K messages (n bytes) per child. Any P, any root.
#include <algorithm>

#include "../builders.h"
#include "../patterns.h"

namespace collx::algorithms {

Schedule buildBroadcastBinomial(const ScheduleParams& p) {
  Schedule s("binomial");
  const int P = p.size;
  if (P == 1) return s;
  const std::uint64_t n = p.bytes();
  const int v = patterns::mod(p.rank - p.root, P);
  int parent = -1;
  int mask = 1;
  while (mask < P) {
    if (v & mask) {
      parent = patterns::mod(v - mask + p.root, P);
      break;
    }
    mask <<= 1;
  }
  std::vector<int> children;
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (v + mask < P) children.push_back(patterns::mod(v + mask + p.root, P));
  }
  const std::uint64_t piece =
      std::max<std::uint64_t>(p.elementSize, p.chunkBytes / p.elementSize * p.elementSize);
  const std::uint64_t K = n == 0 ? 1 : (n + piece - 1) / piece;
  for (std::uint64_t k = 0; k < K; ++k) {
    const std::uint64_t off = k * piece;
    const std::uint64_t len = n == 0 ? 0 : std::min(piece, n - off);
    const std::uint32_t step = static_cast<std::uint32_t>(k);
    Deps deps;
    if (parent >= 0) deps.push_back(s.recv(parent, step, output(off), len));
    for (int child : children) s.send(child, step, output(off), len, deps);
  }
  return s;
}

Cost costBroadcastBinomial(const ScheduleParams& p) {
  const int P = p.size;
  if (P == 1) return Cost{};
  const std::uint64_t n = p.bytes();
  const std::uint64_t piece =
      std::max<std::uint64_t>(p.elementSize, p.chunkBytes / p.elementSize * p.elementSize);
  const std::uint64_t K = n == 0 ? 1 : (n + piece - 1) / piece;
  const int v = patterns::mod(p.rank - p.root, P);
  const auto children = static_cast<std::uint64_t>(patterns::BinomialTree{P}.children(v).size());
  Cost c;
  c.sends = K * children;
  c.sendBytes = n * children;
  if (v != 0) {
    c.recvs = K;
    c.recvBytes = n;
  }
  return c;
}

const AlgorithmInfo kBroadcastBinomial{
    .coll = Collective::kBroadcast,
    .name = "binomial",
    .summary = "binomial tree, pipelined in chunks: ceil(log2 P) steps",
    .build = buildBroadcastBinomial,
    .cost = costBroadcastBinomial,
    .doc = {
        .rounds = "floor(log2 P)",
        .perRank =
            "k messages of n per child: ceil(log2 P) k messages, ceil(log2 P) n bytes at the root",
        .cost = "ceil(log2 P) (alpha + n beta); pieces bring the beta term towards (n + log2 P "
                "chunkBytes) beta only where a rank feeds its children in parallel, not through "
                "the one outgoing link of the model",
        .restrictions = "any P, any root"}};

}  // namespace collx::algorithms
