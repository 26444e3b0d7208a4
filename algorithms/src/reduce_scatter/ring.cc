// reduce_scatter ring: the first half of the allreduce ring, ending with every rank holding
// its own block. At step s (0..P-2) rank r sends its partial sum of block (r-s-1) to r+1 and
// receives the partial of block (r-s-2) from r-1, adding its own contribution; at the last
// step that block is r's own, reduced into the output. Per-rank counts (blocks of any size,
// zero included) come from ScheduleParams::counts; equal counts are the special case.
//
//   P=3, partial sums after step   rank0     rank1     rank2
//   0                              b1:2+0    b2:0+1    b0:1+2
//   1 (blocks are final)           b0:all    b1:all    b2:all
//
// Cost (n = sum of counts): (P-1) alpha + (n - n_{r-1}) beta + (n - n_{r-1}) gamma per rank.
// Exactly (costReduceScatterRing), with k_i the pieces of block i (none when empty): rank r
// sends the partials of every block but its own, sum_{i != r} k_i messages of n - n_r
// elements, and receives and reduces every block but r-1's, sum_{i != r-1} k_i messages of
// n - n_{r-1} elements (the block r-1 starts its way around the ring at r). Any P.
// The order of the reduction follows the ring, not the ranks: commutative ops only.
#include <algorithm>

#include "../builders.h"
#include "../patterns.h"

namespace collx::algorithms {

Cost costReduceScatterRing(const ScheduleParams& p) {
  const int P = p.size, r = p.rank;
  if (P == 1) return {};
  const std::uint64_t es = p.elementSize;
  const std::uint64_t piece = std::max<std::uint64_t>(es, p.chunkBytes / es * es);
  std::uint64_t n = 0, pieces = 0;
  for (std::uint64_t c : p.counts) {
    n += c;
    pieces += patterns::piecesOf(c * es, piece);
  }
  const int prev = patterns::mod(r - 1, P);
  Cost c;
  c.sends = pieces - patterns::piecesOf(p.counts[r] * es, piece);
  c.sendBytes = (n - p.counts[r]) * es;
  c.recvs = pieces - patterns::piecesOf(p.counts[prev] * es, piece);
  c.recvBytes = (n - p.counts[prev]) * es;
  c.reducedElements = n - p.counts[prev];
  return c;
}

Schedule buildReduceScatterRing(const ScheduleParams& p) {
  const int P = p.size;
  const int r = p.rank;
  const std::uint64_t es = p.elementSize;
  Schedule s("ring");
  auto bytes = [&](int i) { return p.counts[i] * es; };
  auto offset = [&](int i) { return p.displs[i] * es; };
  std::uint64_t total = 0;
  for (std::uint64_t c : p.counts) total += c;
  if (P == 1) {
    if (bytes(0) > 0) s.copy(output(), input(), bytes(0));
    return s;
  }
  const int left = patterns::mod(r - 1, P), right = patterns::mod(r + 1, P);
  const std::uint64_t piece = std::max<std::uint64_t>(es, p.chunkBytes / es * es);
  auto pieces = [&](int i) { return bytes(i) == 0 ? 0 : (bytes(i) + piece - 1) / piece; };
  std::vector<std::uint64_t> firstPiece(P + 1, 0);
  for (int i = 0; i < P; ++i) firstPiece[i + 1] = firstPiece[i] + pieces(i);
  // Scratch: the received pieces (one region per block, at its displacement) and the
  // partial sums this rank forwards (a second region of the same layout).
  s.setScratchBytes(2 * total * es);
  const std::uint64_t partials = total * es;
  std::vector<std::vector<TaskId>> reduced(P);  // per block: the reduce of each piece
  for (int st = 0; st + 1 < P; ++st) {
    const int sendBlock = patterns::mod(r - st - 1, P);
    const int recvBlock = patterns::mod(r - st - 2, P);
    const bool last = st + 2 == P;  // recvBlock == r: reduce into the output
    for (std::uint64_t k = 0; k < pieces(recvBlock); ++k) {
      const std::uint64_t off = k * piece, len = std::min(piece, bytes(recvBlock) - off);
      const auto step = static_cast<std::uint32_t>(firstPiece[recvBlock] + k);
      TaskId got = s.recv(left, step, scratch(offset(recvBlock) + off), len);
      BufferRef dst = last ? output(off) : scratch(partials + offset(recvBlock) + off);
      reduced[recvBlock].push_back(s.reduce(dst, input(offset(recvBlock) + off),
                                            scratch(offset(recvBlock) + off), len / es, {got}));
    }
    for (std::uint64_t k = 0; k < pieces(sendBlock); ++k) {
      const std::uint64_t off = k * piece, len = std::min(piece, bytes(sendBlock) - off);
      const auto step = static_cast<std::uint32_t>(firstPiece[sendBlock] + k);
      if (st == 0) {
        s.send(right, step, input(offset(sendBlock) + off), len);
      } else {
        s.send(right, step, scratch(partials + offset(sendBlock) + off), len,
               {reduced[sendBlock][k]});
      }
    }
  }
  if (p.op == ReduceOpKind::kAvg && p.counts[r] > 0) s.divide(output(), p.counts[r], reduced[r]);
  return s;
}

const AlgorithmInfo kReduceScatterRing{
    .coll = Collective::kReduceScatter,
    .name = "ring",
    .summary =
        "P-1 steps; n - n_r bytes out, n - n_(r-1) in and reduced per rank; pipelined in chunks",
    .build = buildReduceScatterRing,
    .cost = costReduceScatterRing,
    .doc = {.rounds = "P-1",
            .perRank = "N - n_r bytes; receives and reduces N - n_(r-1)",
            .cost = "(P-1) alpha + (N - n_r) beta + (N - n_(r-1)) gamma",
            .restrictions = "any P, any counts; commutative ops only (ring order)"}};

}  // namespace collx::algorithms
