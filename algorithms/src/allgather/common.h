// What the allgather algorithms share: the block arithmetic of the gathered buffer (P blocks
// of p.bytes() in rank order), the trivial cases, and the pieces large transfers move in.
#pragma once

#include <algorithm>
#include <cstdint>

#include "../builders.h"

namespace collx::algorithms::allgather {

// Nothing to move: one rank, or empty blocks. Every allgather then only places its own block.
inline bool trivial(const ScheduleParams& p) { return p.size == 1 || p.bytes() == 0; }

// Places this rank's block in the output (out of place only); returns the copy's id in
// `produced`, for the sends that read the block from the output later.
inline void placeOwnBlock(const ScheduleParams& p, Schedule& s, Deps& produced) {
  const std::uint64_t block = p.bytes();
  if (!p.inPlace && block > 0) {
    produced.push_back(s.copy(output(static_cast<std::uint64_t>(p.rank) * block), input(), block));
  }
}

// The pieces chunked transfers move in: at most chunkBytes, whole elements, at least one.
inline std::uint64_t pieceBytes(const ScheduleParams& p) {
  return std::max<std::uint64_t>(p.elementSize, p.chunkBytes / p.elementSize * p.elementSize);
}

inline std::uint64_t piecesOf(std::uint64_t bytes, std::uint64_t piece) {
  return (bytes + piece - 1) / piece;
}

// Blocks [first, first + n) modulo P, as at most two ranges of the output: calls
// f(firstBlock, blocks, part) with part 0 for [first, min(first + n, P)) and part 1 for the
// part that wraps around to block 0. Sender and receiver of a range split it alike.
template <typename F>
void forEachWrappedRange(int first, int n, int P, F&& f) {
  if (first + n <= P) {
    f(first, n, 0);
  } else {
    f(first, P - first, 0);
    f(0, first + n - P, 1);
  }
}

// The number of ranges forEachWrappedRange() calls f with.
inline int wrappedParts(int first, int n, int P) { return first + n <= P ? 1 : 2; }

inline bool isPowerOfTwo(int n) { return n > 0 && (n & (n - 1)) == 0; }

}  // namespace collx::algorithms::allgather
