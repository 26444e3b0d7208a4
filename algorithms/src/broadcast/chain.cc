// broadcast chain: the ranks form a chain from the root, root -> root+1 -> ... -> root-1,
// and the buffer flows down it in pieces of at most chunkBytes: a rank forwards piece k
// while piece k+1 arrives, so every link is busy at once once the pipeline has filled.
//
//   P=4, root 0, pieces k0..k2 (time runs down):
//   t0: 0->1 k0
//   t1: 0->1 k1, 1->2 k0
//   t2: 0->1 k2, 1->2 k1, 2->3 k0
//   t3:          1->2 k2, 2->3 k1
//   t4:                   2->3 k2
//
// Cost (K pieces of c bytes, n = K c): (P - 2 + K)(alpha + c beta): about n beta for large
// buffers whatever P, but P - 1 alphas of latency for the last rank. Exactly: each rank but
// the root receives K messages (n bytes), each but the last sends K (n bytes), K =
// ceil(n / piece) with piece = chunkBytes rounded down to whole elements (K = 1 with a
// zero-byte message for an empty buffer). Any P, any root.
#include <algorithm>

#include "../builders.h"
#include "../patterns.h"

namespace collx::algorithms {

namespace {

std::uint64_t pieceBytes(const ScheduleParams& p) {
  return std::max<std::uint64_t>(p.elementSize, p.chunkBytes / p.elementSize * p.elementSize);
}

std::uint64_t pieces(const ScheduleParams& p) {
  const std::uint64_t n = p.bytes(), piece = pieceBytes(p);
  return n == 0 ? 1 : (n + piece - 1) / piece;
}

}  // namespace

Schedule buildBroadcastChain(const ScheduleParams& p) {
  Schedule s("chain");
  const int P = p.size;
  if (P == 1) return s;
  const int u = patterns::mod(p.rank - p.root, P);
  const int prev = patterns::mod(p.rank - 1, P), next = patterns::mod(p.rank + 1, P);
  const std::uint64_t n = p.bytes(), piece = pieceBytes(p), K = pieces(p);
  for (std::uint64_t k = 0; k < K; ++k) {
    const std::uint64_t off = k * piece;
    const std::uint64_t len = n == 0 ? 0 : std::min(piece, n - off);
    const auto step = static_cast<std::uint32_t>(k);
    Deps deps;
    if (u > 0) deps.push_back(s.recv(prev, step, output(off), len));
    if (u + 1 < P) s.send(next, step, output(off), len, deps);
  }
  return s;
}

Cost costBroadcastChain(const ScheduleParams& p) {
  const int P = p.size;
  if (P == 1) return Cost{};
  const int u = patterns::mod(p.rank - p.root, P);
  const std::uint64_t K = pieces(p), n = p.bytes();
  Cost c;
  if (u > 0) {
    c.recvs = K;
    c.recvBytes = n;
  }
  if (u + 1 < P) {
    c.sends = K;
    c.sendBytes = n;
  }
  return c;
}

const AlgorithmInfo kBroadcastChain{
    .coll = Collective::kBroadcast,
    .name = "chain",
    .summary =
        "root -> root+1 -> ... in pieces of chunkBytes; P-2+K steps of one piece, n bytes per "
        "link",
    .build = buildBroadcastChain,
    .cost = costBroadcastChain,
    .doc = {
        .rounds = "P-1",
        .perRank = "k messages, n bytes (every rank but the last)",
        .cost = "(P-2+k) (alpha + n/k beta) with its pieces ((P-1) (alpha + n beta) without)",
        .restrictions =
            "any P, any root; for large n: about n beta whatever P, but P-1 alphas of latency"}};

}  // namespace collx::algorithms
