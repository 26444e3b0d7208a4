// allgatherv bruck: Bruck's allgather (allgather/bruck.cc) with per-rank blocks of any size,
// ceil(log2 P) steps for any P. At the step of distance d (1, 2, 4, ... < P) rank r holds
// the blocks of ranks r .. r+d-1 (mod P), sends the first min(d, P-d) of them to r-d and
// receives as many, the blocks of r+d .., from r+d.
//
// The blocks sit in the output at arbitrary displacements, so a message of several blocks
// is not one region of it. Each rank therefore keeps the blocks in a scratch buffer packed
// in rank-relative order (its own block first, then r+1, r+2, ...): what it sends at every
// step is a prefix of that buffer and what it receives extends it, one contiguous message
// each way per step. Each received block is copied to its displacement as soon as its
// message is in. Steps whose blocks are all empty move no message.
//
//   P=5, scratch after step   rank0           rank1           ...   rank4
//   (start)                   b0              b1                    b4
//   d=1                       b0 b1           b1 b2                 b4 b0
//   d=2                       b0 b1 b2 b3     b1 b2 b3 b4           b4 b0 b1 b2
//   d=4 (1 block)             b0 b1 b2 b3 b4  b1 b2 b3 b4 b0        b4 b0 b1 b2 b3
//
// Cost (N = the sum of all blocks' bytes, n_r this rank's): ceil(log2 P) alpha +
// (N - n_r) beta received; the bytes sent at a step are those of the blocks r .. r+cnt-1
// (the own block goes out at every step: with unequal blocks a rank may send more than N). Local
// copies: N bytes (the own block into the scratch, every other block out of it); scratch N bytes.
// Any P, any counts (0 included), any non-overlapping displacements. For small and mid-sized
// totals; the ring moves less per rank's link when blocks are large.
#include <algorithm>
#include <optional>

#include "../builders.h"
#include "../patterns.h"

namespace collx::algorithms {

namespace {

// The scratch layout of rank r: at[m] is where the block of rank r+m (mod P) starts, m in
// [0, P]; at[P] is the total.
std::vector<std::uint64_t> packedOffsets(const ScheduleParams& p) {
  const int P = p.size;
  std::vector<std::uint64_t> at(static_cast<std::size_t>(P) + 1, 0);
  for (int m = 0; m < P; ++m) {
    at[m + 1] = at[m] + p.counts[(p.rank + m) % P] * p.elementSize;
  }
  return at;
}

}  // namespace

Schedule buildAllgathervBruck(const ScheduleParams& p) {
  const int P = p.size;
  const int r = p.rank;
  const std::uint64_t es = p.elementSize;
  auto bytesOf = [&](int i) { return p.counts[i] * es; };
  Schedule s("bruck");
  if (!p.inPlace && bytesOf(r) > 0) s.copy(output(p.displs[r] * es), input(), bytesOf(r));
  if (P == 1) return s;
  const std::vector<std::uint64_t> at = packedOffsets(p);
  s.setScratchBytes(at[P]);
  Deps held;  // the tasks that filled the scratch prefix: every later send reads it
  // The first step sends the own block straight from the input; later ones send it from the
  // scratch (there are later steps only when P > 2).
  if (P > 2 && bytesOf(r) > 0) held.push_back(s.copy(scratch(0), input(), bytesOf(r)));
  std::uint32_t j = 0;
  for (int d = 1; d < P; d *= 2, ++j) {
    const int cnt = std::min(d, P - d);
    const int to = patterns::mod(r - d, P), from = patterns::mod(r + d, P);
    const std::uint64_t recvBytes = at[d + cnt] - at[d];
    const std::uint64_t sendBytes = at[cnt];
    std::optional<TaskId> got;
    if (recvBytes > 0) {
      got = s.recv(from, j, scratch(at[d]), recvBytes);
      for (int m = d; m < d + cnt; ++m) {
        const int i = (r + m) % P;
        if (bytesOf(i) > 0) s.copy(output(p.displs[i] * es), scratch(at[m]), bytesOf(i), {*got});
      }
    }
    if (sendBytes > 0) {
      if (d == 1) {
        s.send(to, j, input(), sendBytes);
      } else {
        s.send(to, j, scratch(0), sendBytes, held);
      }
    }
    if (got) held.push_back(*got);
  }
  return s;
}

Cost costAllgathervBruck(const ScheduleParams& p) {
  Cost c;
  const int P = p.size;
  if (P == 1) return c;
  const std::vector<std::uint64_t> at = packedOffsets(p);
  for (int d = 1; d < P; d *= 2) {
    const int cnt = std::min(d, P - d);
    // One message each way per step, unless its blocks are all empty.
    const std::uint64_t sent = at[cnt], received = at[d + cnt] - at[d];
    c.sends += sent > 0 ? 1 : 0;
    c.sendBytes += sent;
    c.recvs += received > 0 ? 1 : 0;
    c.recvBytes += received;
  }
  return c;
}

const AlgorithmInfo kAllgathervBruck{
    .coll = Collective::kAllgatherv,
    .name = "bruck",
    .summary =
        "ceil(log2 P) steps of doubling distance, blocks packed in a scratch buffer, N - n_r "
        "bytes received",
    .build = buildAllgathervBruck,
    .cost = costAllgathervBruck,
    .doc = {
        .rounds = "ceil(log2 P)",
        .perRank =
            "ceil(log2 P) messages (none for a step whose blocks are all empty), at distance d the "
            "blocks of r .. r+min(d, P-d)-1: (P-1)/P N bytes for equal blocks; receives N - n_r",
        .cost = "ceil(log2 P) alpha + (N - n_r) beta",
        .restrictions = "any P, any counts (zeros too); scratch N bytes"}};

}  // namespace collx::algorithms
