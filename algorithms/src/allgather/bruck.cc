// allgather bruck (Bruck et al., radix 2): ceil(log2 P) steps of doubling distance. At the
// step of distance d (1, 2, 4, ... < P) rank r holds blocks r .. r+d-1 (mod P); it sends the
// first min(d, P-d) of them to r-d and receives as many, blocks r+d .., from r+d.
//
//   P=6, after step   rank0          rank1          rank2          ...   rank5
//   (start)           b0             b1             b2                   b5
//   d=1               b0 b1          b1 b2          b2 b3                b5 b0
//   d=2               b0 b1 b2 b3    b1 b2 b3 b4    b2 b3 b4 b5          b5 b0 b1 b2
//   d=4 (2 blocks)    all six        all six        all six              all six
//
// Open MPI keeps the blocks in rank-relative order (own block first) in a shifted buffer and
// rotates them into place at the end. Here every block lands straight at its place in the
// output instead: the range r+d .. r+d+cnt-1 (mod P) is contiguous in the output unless it
// wraps past the last block, and then it moves as two messages, split at block P-1 alike on
// both sides. No scratch and no final copy, for at most one more message per step.
//
// Cost (n bytes per rank): ceil(log2 P) alpha (+1 alpha per step whose range wraps) +
// (P-1) n beta. Each rank sends and receives (P-1) n bytes. Any P, any count; the
// latency-optimal choice for small blocks when P is not a power of two.
#include "../patterns.h"
#include "common.h"

namespace collx::algorithms {

Schedule buildAllgatherBruck(const ScheduleParams& p) {
  const int P = p.size;
  const int r = p.rank;
  const std::uint64_t block = p.bytes();
  Schedule s("bruck");
  Deps held;  // the tasks that brought the blocks this rank holds: every later send reads them
  allgather::placeOwnBlock(p, s, held);
  if (allgather::trivial(p)) return s;
  std::uint32_t j = 0;
  for (int d = 1; d < P; d *= 2, ++j) {
    const int cnt = std::min(d, P - d);
    const int to = patterns::mod(r - d, P), from = patterns::mod(r + d, P);
    Deps got;
    allgather::forEachWrappedRange(
        patterns::mod(r + d, P), cnt, P, [&](int first, int n, int part) {
          got.push_back(s.recv(from, 2 * j + part, output(first * block), n * block));
        });
    allgather::forEachWrappedRange(r, cnt, P, [&](int first, int n, int part) {
      // The first step sends only the own block: from the input, without waiting for its copy.
      if (d == 1) {
        s.send(to, 2 * j + part, input(), block);
      } else {
        s.send(to, 2 * j + part, output(first * block), n * block, held);
      }
    });
    held.insert(held.end(), got.begin(), got.end());
  }
  return s;
}

Cost costAllgatherBruck(const ScheduleParams& p) {
  Cost c;
  if (allgather::trivial(p)) return c;
  const int P = p.size;
  for (int d = 1; d < P; d *= 2) {
    const int cnt = std::min(d, P - d);
    c.sends += allgather::wrappedParts(p.rank, cnt, P);
    c.recvs += allgather::wrappedParts(patterns::mod(p.rank + d, P), cnt, P);
  }
  c.sendBytes = c.recvBytes = static_cast<std::uint64_t>(P - 1) * p.bytes();
  return c;
}

const AlgorithmInfo kAllgatherBruck{
    .coll = Collective::kAllgather,
    .name = "bruck",
    .summary = "ceil(log2 P) steps to r-d of doubling distance d, (P-1) n bytes; any P",
    .build = buildAllgatherBruck,
    .cost = costAllgatherBruck,
    .doc = {
        .rounds = "ceil(log2 P)",
        .perRank =
            "ceil(log2 P) messages, +1 per step whose blocks wrap past block P-1; (P-1) n bytes",
        .cost = "ceil(log2 P) alpha (+ alpha per wrapping step) + (P-1) n beta",
        .restrictions = "any P, any count"}};

}  // namespace collx::algorithms
