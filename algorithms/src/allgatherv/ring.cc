// allgatherv ring: the allgather ring (allgather/ring.cc) with per-rank blocks: at step s
// rank r sends block (r-s) to r+1 and receives block (r-s-1) from r-1 straight into the
// output at its displacement, each block moved in pieces of at most chunkBytes. Every rank
// receives exactly the counts it was given (no padding to the largest block), and empty
// blocks move no message at all.
//
// Cost (n = sum of counts): (P-1) alpha + (n - n_r) beta per rank. Any P, any counts.
// Exactly (costAllgathervRing): rank r sends every block but r+1's and receives every block
// but its own, one message per piece (k_i pieces for block i, none for an empty block):
// sum_{i != r+1} k_i messages and n - n_{r+1} elements out, sum_{i != r} k_i and n - n_r in.
#include <algorithm>

#include "../builders.h"
#include "../patterns.h"

namespace collx::algorithms {

Cost costAllgathervRing(const ScheduleParams& p) {
  const int P = p.size, r = p.rank;
  if (P == 1) return {};
  const std::uint64_t es = p.elementSize;
  const std::uint64_t piece = std::max<std::uint64_t>(es, p.chunkBytes / es * es);
  std::uint64_t n = 0, pieces = 0;
  for (std::uint64_t c : p.counts) {
    n += c;
    pieces += patterns::piecesOf(c * es, piece);
  }
  const int next = patterns::mod(r + 1, P);
  Cost c;
  c.sends = pieces - patterns::piecesOf(p.counts[next] * es, piece);
  c.sendBytes = (n - p.counts[next]) * es;
  c.recvs = pieces - patterns::piecesOf(p.counts[r] * es, piece);
  c.recvBytes = (n - p.counts[r]) * es;
  return c;
}

Schedule buildAllgathervRing(const ScheduleParams& p) {
  const int P = p.size;
  const int r = p.rank;
  const std::uint64_t es = p.elementSize;
  Schedule s("ring");
  auto blockBytes = [&](int i) { return p.counts[i] * es; };
  auto blockOffset = [&](int i) { return p.displs[i] * es; };
  if (!p.inPlace && blockBytes(r) > 0) s.copy(output(blockOffset(r)), input(), blockBytes(r));
  if (P == 1) return s;
  const int left = patterns::mod(r - 1, P), right = patterns::mod(r + 1, P);
  const std::uint64_t piece = std::max<std::uint64_t>(es, p.chunkBytes / es * es);
  // Pieces of block i; every rank computes the same split of the same block.
  auto pieces = [&](int i) { return blockBytes(i) == 0 ? 0 : (blockBytes(i) + piece - 1) / piece; };
  // Message steps: a global piece index, the same on every rank (same counts).
  std::vector<std::uint64_t> firstPiece(P + 1, 0);
  for (int i = 0; i < P; ++i) firstPiece[i + 1] = firstPiece[i] + pieces(i);
  auto step = [&](int block, std::uint64_t k) {
    return static_cast<std::uint32_t>(firstPiece[block] + k);
  };
  std::vector<std::vector<TaskId>> got(P);  // receive task per (block, piece)
  for (int st = 0; st + 1 < P; ++st) {
    const int sendBlock = patterns::mod(r - st, P);
    const int recvBlock = patterns::mod(r - st - 1, P);
    for (std::uint64_t k = 0; k < pieces(recvBlock); ++k) {
      const std::uint64_t off = k * piece, len = std::min(piece, blockBytes(recvBlock) - off);
      got[recvBlock].push_back(
          s.recv(left, step(recvBlock, k), output(blockOffset(recvBlock) + off), len));
    }
    for (std::uint64_t k = 0; k < pieces(sendBlock); ++k) {
      const std::uint64_t off = k * piece, len = std::min(piece, blockBytes(sendBlock) - off);
      if (st == 0) {
        BufferRef src = p.inPlace ? output(blockOffset(r) + off) : input(off);
        s.send(right, step(sendBlock, k), src, len);
      } else {
        s.send(right, step(sendBlock, k), output(blockOffset(sendBlock) + off), len,
               {got[sendBlock][k]});
      }
    }
  }
  return s;
}

const AlgorithmInfo kAllgathervRing{
    .coll = Collective::kAllgatherv,
    .name = "ring",
    .summary = "P-1 steps, per-rank blocks straight into place, pipelined in chunks",
    .build = buildAllgathervRing,
    .cost = costAllgathervRing,
    .doc = {.rounds = "P-1",
            .perRank = "N - n_(r+1) bytes, one message per piece of each non-empty block",
            .cost = "(P-1) alpha + (N - n_r) beta",
            .restrictions = "any P, any counts (zeros too)"}};

}  // namespace collx::algorithms
