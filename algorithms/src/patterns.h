// Rank and block arithmetic shared by the algorithms: no I/O, unit-tested on its own.
#pragma once

#include <cstdint>

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

}  // namespace collx::algorithms::patterns
