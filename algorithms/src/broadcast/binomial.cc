// broadcast binomial: a binomial tree rooted at the root; every rank receives once from its
// parent and forwards to its children, the buffer moved in pieces of at most chunkBytes so
// that a rank forwards a piece while the next one arrives.
//
// With v = (rank - root) mod P: the parent of v is v with its lowest set bit cleared; the
// children of v are v + 2^k for every 2^k below v's lowest set bit (all powers for the root).
//
//   P=8, root 0:   0 -> 4, 2, 1;   4 -> 6, 5;   2 -> 3;   6 -> 7
//
// Cost: ceil(log2 P) alpha + ceil(log2 P) n beta without pipelining. Pieces bring the beta
// term towards (n + log2 P * chunk) beta only where a rank feeds its children in parallel;
// through one outgoing link the root still sends ceil(log2 P) n bytes (the simulator's
// model), and pieces then add alphas and only let the ranks down the tree start earlier.
// Any P, any root.
// Counts (costBroadcastBinomial), k = the pieces of n (1 when n is 0: one empty message per
// edge): every rank but the root receives k messages and n bytes from its parent, and sends
// as much to each of its children (ceil(log2 P) of them at the root).
#include <algorithm>

#include "../builders.h"
#include "../patterns.h"

namespace collx::algorithms {

Cost costBroadcastBinomial(const ScheduleParams& p) {
  if (p.size == 1) return {};
  const std::uint64_t n = p.bytes();
  const std::uint64_t piece =
      std::max<std::uint64_t>(p.elementSize, p.chunkBytes / p.elementSize * p.elementSize);
  const std::uint64_t k = n == 0 ? 1 : patterns::piecesOf(n, piece);
  const int v = patterns::mod(p.rank - p.root, p.size);
  const auto children = static_cast<std::uint64_t>(patterns::binomialChildren(v, p.size));
  const std::uint64_t parents = v == 0 ? 0 : 1;
  return Cost{children * k, children * n, parents * k, parents * n, 0};
}

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

}  // namespace collx::algorithms
