// allgather linear (Open MPI's basic linear): a gather to rank 0, then a broadcast of the
// whole gathered buffer from rank 0. Every rank sends its block to rank 0, which receives
// the P-1 blocks straight into place; rank 0 then broadcasts the P blocks down a binomial
// tree (broadcast/binomial.cc: the parent of v is v without its lowest set bit), in pieces of
// at most chunkBytes so that a rank forwards a piece while the next one arrives, and rank 0
// sends a piece as soon as the blocks it covers have come in.
//
//   P=4, after step   rank0          rank1          rank2          rank3
//   (start)           b0             b1             b2             b3
//   gather            b0 b1 b2 b3    b1             b2             b3
//   bcast 0 -> 2, 1   b0 b1 b2 b3    b0 b1 b2 b3    b0 b1 b2 b3    b3
//   bcast 2 -> 3      b0 b1 b2 b3    b0 b1 b2 b3    b0 b1 b2 b3    b0 b1 b2 b3
//
// Cost (n bytes per rank, N = P n gathered): gather (P-1) alpha + (P-1) n beta at rank 0
// (serialized there), then ceil(log2 P) (alpha + N beta) without pipelining, towards
// ceil(log2 P) alpha + N beta with it. The simplest algorithm and the slowest but for tiny
// P; every rank receives its own block back (N bytes each), which keeps the broadcast one
// contiguous transfer. Any P, any count.
#include "../patterns.h"
#include "common.h"

namespace collx::algorithms {

namespace {

// The binomial tree rooted at rank 0: the parent of v (-1 for the root) and its children,
// nearest subtree last (so that the largest subtrees get the data first).
struct Tree {
  int parent = -1;
  std::vector<int> children;
  Tree(int v, int P) {
    int mask = 1;
    while (mask < P && (v & mask) == 0) mask <<= 1;
    if (v != 0) parent = v - mask;
    for (mask >>= 1; mask > 0; mask >>= 1) {
      if (v + mask < P) children.push_back(v + mask);
    }
  }
};

}  // namespace

Schedule buildAllgatherLinear(const ScheduleParams& p) {
  const int P = p.size;
  const int r = p.rank;
  const std::uint64_t block = p.bytes();
  Schedule s("linear");
  if (allgather::trivial(p)) {
    Deps own;
    allgather::placeOwnBlock(p, s, own);
    return s;
  }
  const std::uint64_t total = static_cast<std::uint64_t>(P) * block;
  const std::uint64_t piece = allgather::pieceBytes(p);
  const std::uint64_t K = allgather::piecesOf(total, piece);
  const Tree tree(r, P);
  // Message steps: 0 for the gather (towards rank 0), 1 + k for piece k of the broadcast
  // (away from it): unique in each direction.
  std::vector<TaskId> producer(static_cast<std::size_t>(P));  // rank 0: the task per block
  TaskId gathered = 0;                                        // others: their gather send
  if (r == 0) {
    Deps own;
    allgather::placeOwnBlock(p, s, own);
    for (int i = 1; i < P; ++i) {
      producer[i] = s.recv(i, 0, output(static_cast<std::uint64_t>(i) * block), block);
    }
    if (!own.empty()) producer[0] = own[0];
  } else {
    // Out of place the broadcast brings the own block too: no copy needed.
    gathered = s.send(0, 0, input(), block);
  }
  for (std::uint64_t k = 0; k < K; ++k) {
    const std::uint64_t off = k * piece;
    const std::uint64_t len = std::min(piece, total - off);
    const auto step = static_cast<std::uint32_t>(1 + k);
    Deps deps;
    if (r == 0) {
      // The blocks this piece covers.
      for (std::uint64_t b = off / block; b <= (off + len - 1) / block; ++b) {
        if (b != 0 || !p.inPlace) deps.push_back(producer[b]);
      }
    } else {
      // In place, the piece that covers the own block overwrites (with equal bytes) what the
      // gather send reads.
      const std::uint64_t mine = static_cast<std::uint64_t>(r) * block;
      Deps hazard;
      if (p.inPlace && off < mine + block && mine < off + len) hazard.push_back(gathered);
      deps.push_back(s.recv(tree.parent, step, output(off), len, hazard));
    }
    for (int child : tree.children) s.send(child, step, output(off), len, deps);
  }
  return s;
}

Cost costAllgatherLinear(const ScheduleParams& p) {
  Cost c;
  if (allgather::trivial(p)) return c;
  const int P = p.size;
  const std::uint64_t block = p.bytes();
  const std::uint64_t total = static_cast<std::uint64_t>(P) * block;
  const std::uint64_t K = allgather::piecesOf(total, allgather::pieceBytes(p));
  const auto children = static_cast<std::uint64_t>(Tree(p.rank, P).children.size());
  c.sends = children * K;
  c.sendBytes = children * total;
  if (p.rank == 0) {
    c.recvs = static_cast<std::uint64_t>(P - 1);
    c.recvBytes = static_cast<std::uint64_t>(P - 1) * block;
  } else {
    c.sends += 1;
    c.sendBytes += block;
    c.recvs = K;
    c.recvBytes = total;
  }
  return c;
}

const AlgorithmInfo kAllgatherLinear{
    .coll = Collective::kAllgather,
    .name = "linear",
    .summary = "gather to rank 0, then a binomial broadcast of all P n bytes, pipelined in chunks",
    .build = buildAllgatherLinear,
    .cost = costAllgatherLinear,
    .doc = {.rounds = "1 + floor(log2 P)",
            .perRank =
                "rank 0: ceil(log2 P) k messages, ceil(log2 P) P n bytes (P n to each child, k "
                "the pieces of P n); the others: n to rank 0, then P n to each child",
            .cost = "(P-1) (alpha + n beta) at rank 0, then ceil(log2 P) (alpha + P n beta)",
            .restrictions = "any P, any count; every rank receives its own block back"}};

}  // namespace collx::algorithms
