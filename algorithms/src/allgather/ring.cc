// allgather ring: P-1 steps; at step s rank r sends block (r-s) to r+1 and receives block
// (r-s-1) from r-1 straight into the output, each block moved in pieces of at most
// chunkBytes so that forwarding overlaps receiving.
//
//   P=4, after step   rank0       rank1       rank2       rank3
//   (start)           b0          b1          b2          b3
//   0                 b0 b3       b1 b0       b2 b1       b3 b2
//   1                 b0 b3 b2    b1 b0 b3    ...
//   2                 all four blocks everywhere
//
// Cost (n bytes per rank): (P-1) alpha + (P-1) n beta. Any P, any count (0 included).
// Exactly (costAllgatherRing): (P-1) n bytes each way in (P-1) k messages, k the pieces of
// one block; nothing at all when n is 0 or P is 1.
#include <algorithm>

#include "../builders.h"
#include "../patterns.h"

namespace collx::algorithms {

Cost costAllgatherRing(const ScheduleParams& p) {
  const std::uint64_t n = p.bytes();
  if (p.size == 1 || n == 0) return {};
  const std::uint64_t piece =
      std::max<std::uint64_t>(p.elementSize, p.chunkBytes / p.elementSize * p.elementSize);
  const std::uint64_t others = static_cast<std::uint64_t>(p.size - 1);
  const std::uint64_t messages = others * patterns::piecesOf(n, piece);
  return Cost{messages, others * n, messages, others * n, 0};
}

Schedule buildAllgatherRing(const ScheduleParams& p) {
  const int P = p.size;
  const int r = p.rank;
  const std::uint64_t block = p.bytes();  // one rank's contribution
  Schedule s("ring");
  // The own block goes into the output last (step 0 sends it from the input), so that the
  // first transfers are under way while it is copied.
  const auto placeOwn = [&] {
    if (!p.inPlace && block > 0) s.copy(output(r * block), input(), block);
  };
  if (P == 1 || block == 0) {
    placeOwn();
    return s;
  }
  const int left = patterns::mod(r - 1, P), right = patterns::mod(r + 1, P);
  const std::uint64_t pieceBytes =
      std::max<std::uint64_t>(p.elementSize, p.chunkBytes / p.elementSize * p.elementSize);
  const std::uint64_t K = (block + pieceBytes - 1) / pieceBytes;
  std::vector<TaskId> prevRecv(K);
  for (int st = 0; st + 1 < P; ++st) {
    const int sendBlock = patterns::mod(r - st, P);
    const int recvBlock = patterns::mod(r - st - 1, P);
    for (std::uint64_t k = 0; k < K; ++k) {
      const std::uint64_t off = k * pieceBytes;
      const std::uint64_t len = std::min(pieceBytes, block - off);
      const std::uint32_t step = static_cast<std::uint32_t>(st * K + k);
      TaskId got = s.recv(left, step, output(recvBlock * block + off), len);
      // Step 0 sends this rank's block: from the input directly when out of place.
      if (st == 0) {
        BufferRef src = p.inPlace ? output(r * block + off) : input(off);
        s.send(right, step, src, len);
      } else {
        s.send(right, step, output(sendBlock * block + off), len, {prevRecv[k]});
      }
      prevRecv[k] = got;
    }
  }
  placeOwn();
  return s;
}

const AlgorithmInfo kAllgatherRing{.coll = Collective::kAllgather,
                                   .name = "ring",
                                   .summary = "P-1 steps, (P-1) n bytes, pipelined in chunks",
                                   .build = buildAllgatherRing,
                                   .cost = costAllgatherRing,
                                   .doc = {.rounds = "P-1",
                                           .perRank = "(P-1) k messages, (P-1) n bytes",
                                           .cost = "(P-1) alpha + (P-1) n beta",
                                           .restrictions = "any P, any count"}};

}  // namespace collx::algorithms
