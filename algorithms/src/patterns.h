// Rank and block arithmetic shared by the algorithms: no I/O, unit-tested on its own.
#pragma once

#include <cstdint>
#include <vector>

namespace collx::algorithms::patterns {

// Splits `count` elements into `parts` blocks as evenly as possible: the first
// count % parts blocks get one element more.
struct Blocks {
  std::uint64_t count;
  int parts;
  std::uint64_t size(int i) const {
    return count / static_cast<std::uint64_t>(parts) +
           (static_cast<std::uint64_t>(i) < count % static_cast<std::uint64_t>(parts) ? 1 : 0);
  }
  std::uint64_t offset(int i) const {
    std::uint64_t base = count / static_cast<std::uint64_t>(parts);
    std::uint64_t extra = count % static_cast<std::uint64_t>(parts);
    std::uint64_t ui = static_cast<std::uint64_t>(i);
    return ui * base + (ui < extra ? ui : extra);
  }
  // Blocks [first, last) as one element range.
  std::uint64_t rangeOffset(int first) const { return offset(first); }
  std::uint64_t rangeSize(int first, int last) const { return offset(last) - offset(first); }
};

inline int mod(int a, int n) { return ((a % n) + n) % n; }

// Largest power of two <= n (n >= 1).
inline int powerOfTwoBelow(int n) {
  int p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}

inline int log2Exact(int n) {
  int l = 0;
  while ((1 << l) < n) ++l;
  return l;
}

// Folding a non-power-of-two group onto its largest power of two p: the first 2*rem ranks
// pair up (even -> odd), so that p ranks take part in the main phase.
struct Fold {
  int size;
  int pow2;
  int rem;
  explicit Fold(int n) : size(n), pow2(powerOfTwoBelow(n)), rem(n - powerOfTwoBelow(n)) {}
  // The rank's index in the main phase, or -1 when it only folds in and out.
  int newRank(int rank) const {
    if (rank < 2 * rem) return rank % 2 == 1 ? rank / 2 : -1;
    return rank - rem;
  }
  int realRank(int newRank) const { return newRank < rem ? newRank * 2 + 1 : newRank + rem; }
};

inline std::uint64_t ceilDiv(std::uint64_t a, std::uint64_t b) { return (a + b - 1) / b; }

// The number of pieces of at most `piece` units that `size` units take (0 for nothing).
inline std::uint64_t piecesOf(std::uint64_t size, std::uint64_t piece) {
  return ceilDiv(size, piece);
}

// In a binomial tree over n ranks rooted at 0, the number of children of rank v: the ranks
// v + 2^k below v's lowest set bit (every power of two below n for the root).
inline int binomialChildren(int v, int n) {
  int low = 1;
  while (low < n && (v & low) == 0) low <<= 1;
  int children = 0;
  for (int m = 1; m < low; m <<= 1) children += v + m < n ? 1 : 0;
  return children;
}

// A recursive-halving step: the window [lo, hi) of positions splits at its middle; position
// v keeps the half that holds it (the low half when v & d is 0) and gives the other away.
struct Halves {
  int keepLo, keepHi, giveLo, giveHi;
};
inline Halves halve(int v, int d, int lo, int hi) {
  const int mid = lo + (hi - lo) / 2;
  if ((v & d) == 0) return {lo, mid, mid, hi};
  return {mid, hi, lo, mid};
}

// The low `bits` bits of v in reverse order. Recursive halving with partners at increasing
// distances (r ^ 1, r ^ 2, ...) keeps contiguous windows of blocks when block q sits at
// position reverseBits(q): the halving_doubling, recursive_halving and reduce_scatter_gather
// files use it to combine ranks in order.
inline int reverseBits(int v, int bits) {
  int out = 0;
  for (int i = 0; i < bits; ++i) out |= ((v >> i) & 1) << (bits - 1 - i);
  return out;
}

// A binomial tree over ranks relative to a root, v = (rank - root) mod P: the parent of v is
// v with its lowest set bit cleared; its children are v + m for every power of two m below
// that bit (every m for the root) with v + m < P. The subtree of v spans the relative ranks
// [v, v + span(v)), so a subtree's blocks are contiguous in relative-rank order.
struct BinomialTree {
  int size;
  static int lowBit(int v) { return v & -v; }
  int parent(int v) const { return v == 0 ? -1 : v & (v - 1); }
  int span(int v) const {
    if (v == 0) return size;
    return lowBit(v) < size - v ? lowBit(v) : size - v;
  }
  // Children, nearest first (v + 1, v + 2, v + 4, ...).
  std::vector<int> children(int v) const {
    std::vector<int> out;
    const int limit = v == 0 ? size : lowBit(v);
    for (int m = 1; m < limit && v + m < size; m <<= 1) out.push_back(v + m);
    return out;
  }
};

// Like Fold, but the pair (2i, 2i+1) that holds `keep` keeps that rank in the main phase
// (the other pairs keep their odd rank), so that a root never folds out. New ranks stay in
// rank order: new rank i stands for ranks 2i and 2i+1 (i < rem) or for rank i + rem.
struct RootedFold {
  int size;
  int pow2;
  int rem;
  int keep;
  RootedFold(int n, int keepRank)
      : size(n), pow2(powerOfTwoBelow(n)), rem(n - powerOfTwoBelow(n)), keep(keepRank) {}
  // The rank of a folded pair that stays (-1 when `rank` is not in a pair).
  int survivorOf(int rank) const {
    if (rank >= 2 * rem) return -1;
    const int even = rank & ~1;
    return keep == even ? even : even + 1;
  }
  int partnerOf(int rank) const { return rank ^ 1; }
  int newRank(int rank) const {
    if (rank < 2 * rem) return survivorOf(rank) == rank ? rank / 2 : -1;
    return rank - rem;
  }
  int realRank(int newRank) const {
    if (newRank >= rem) return newRank + rem;
    return keep == 2 * newRank ? 2 * newRank : 2 * newRank + 1;
  }
};

// The elements of the relative ranks [first, last) (relative rank u is rank (u + root) mod P).
inline std::uint64_t relativeCount(const std::vector<std::uint64_t>& counts, int root, int first,
                                   int last) {
  const int P = static_cast<int>(counts.size());
  std::uint64_t n = 0;
  for (int u = first; u < last; ++u) n += counts[mod(u + root, P)];
  return n;
}

// The blocks of the relative ranks [first, last) (relative rank u is rank (u + root) mod P)
// of a buffer laid out by counts / displs: their total count, and whether they lie back to
// back in that order (empty blocks aside), so that one message can carry them straight
// from or into place. displ: where the first non-empty one starts (0 when all are empty).
struct RelativeRange {
  std::uint64_t count = 0;
  bool contiguous = true;
  std::uint64_t displ = 0;
};
inline RelativeRange relativeRange(const std::vector<std::uint64_t>& counts,
                                   const std::vector<std::uint64_t>& displs, int root, int first,
                                   int last) {
  const int P = static_cast<int>(counts.size());
  RelativeRange out;
  bool any = false;
  std::uint64_t end = 0;
  for (int u = first; u < last; ++u) {
    const int i = mod(u + root, P);
    if (counts[i] == 0) continue;
    if (!any) {
      out.displ = displs[i];
    } else if (displs[i] != end) {
      out.contiguous = false;
    }
    any = true;
    end = displs[i] + counts[i];
    out.count += counts[i];
  }
  return out;
}

}  // namespace collx::algorithms::patterns
