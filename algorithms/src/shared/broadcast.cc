// broadcast shm: the root copies the vector into its group buffers in pieces and publishes
// each; the other ranks copy each piece out as soon as it is published (and publish that
// they are done with it). The root runs up to 3 pieces ahead (4 buffers), so copying in and
// out overlap. Two ranks: up to 256 KiB, pieces of a sixteenth (at least 4 KiB), above, of
// B (measured: 64 KiB 5.5 us against 7.5 in eighths; 1 MiB 58 us in pieces of 256 KiB
// against 99 in eighths and 121 in 32nds). More ranks: eighths (at least 8 KiB, at most B);
// halves when ranks outnumber cores.
//   ceil(n / piece) uses; per rank: n bytes copied (root: in; others: out), concurrently.
// From 64 KiB, when every rank can read every other's memory (SharedGroup::directReads), a
// first use carries the root's choice (SharedGroup::chooseDirect): the pieces above, or
// direct reads: every other rank copies the whole vector out of the root's own buffer
// (process_vm_readv, one copy) and publishes; the root returns once all have.
//   direct: 1 use; per rank but the root: n bytes read from the root's buffer.
// (Reading lines the root wrote long ago, not lines it has just written into its group
// buffers: on a VM whose cores at times hand data to each other 2-5x slower, those copies
// keep their speed; in the good periods the pieces are 2-3x faster. Measured, P=2, in
// alternating rounds: 4 MiB direct 315-333 us, pieces 177-182, Open MPI 320-336; 64 MiB
// 10.9-13.0 ms, 4.6-5.5 and 11.4-13.1; and in a slow period the pieces took 29-35 ms.)
#include <algorithm>
#include <chrono>
#include <cstring>

#include "shared.h"

namespace collx::algorithms::shared {

namespace {

constexpr std::uint64_t kDirectMin = 64 * 1024, kDirectOversubscribedMin = ~std::uint64_t{0};

// Returns the last use.
std::uint64_t inPieces(Call& c) {
  const std::uint64_t bytes = c.p.count * c.p.elementSize;
  // Two ranks: many small pieces up to 256 KiB, then whole buffers. More: eighths, fewer
  // pieces for ranks that may wait for a core to be given one. Ranks outnumbering cores:
  // halves, as every piece may cost a reader a wait for a core (measured, 2 cores: P=4
  // 64 KiB 8.2 us against 17.8 in eighths, 4 MiB 430 against 522; P=8 64 KiB 9.3 against
  // 35.8). (Every rank computes the same pieces: the group agreed on oversubscribed().)
  const std::uint64_t parts = c.g.oversubscribed() ? 2 : c.size <= 2 ? 16 : 8;
  const std::uint64_t B =
      c.size <= 2 && bytes > 256 * 1024
          ? c.bufferBytes()
          : std::min<std::uint64_t>(
                c.bufferBytes(),
                std::max<std::uint64_t>(c.size <= 2 ? 4096 : 8192, (bytes / parts + 63) / 64 * 64));
  const int root = c.p.root;
  std::uint64_t off = 0;
  std::uint64_t use = 0;
  do {
    const std::uint64_t len = std::min(B, bytes - off);
    use = c.g.nextUse();
    std::uint8_t* mine = c.begin();
    if (c.me == root) {
      if (len > 0) copyBytes(mine, c.out + off, len);
    } else {
      const std::uint8_t* theirs = c.await(root, use);
      if (len > 0) copyBytes(c.out + off, theirs, len);
    }
    c.publish();
    off += len;
  } while (off < bytes);
  return use;
}

}  // namespace

void broadcast(Call& c) {
  const std::uint64_t bytes = c.p.count * c.p.elementSize;
  // Not when ranks outnumber cores (unless always): the root's wait for every reader costs
  // more than the pieces (P=4 on 2 cores: 64 KiB 19.1-21.8 us against 8.5-11.8), and from 1
  // MiB, where direct reads hold Open MPI's speed when the pieces slow down (1 MiB: direct
  // 191-367 us, pieces 129-137 and 592 in a slow round, Open MPI 277-1000), the root's
  // timing led auto astray: 1 MiB 140-377 us against the pieces' 90-117, 4 MiB 0.7-2.1 ms
  // against 0.5.
  if (!c.mayReadDirectly(bytes, kDirectMin, kDirectOversubscribedMin)) {
    inPieces(c);
    return;
  }
  const transport::DirectReads how = c.g.directReads();
  const int root = c.p.root;
  const auto start = std::chrono::steady_clock::now();
  const std::uint64_t use = c.g.nextUse();
  if (c.me == root) {
    const bool direct = c.g.chooseDirect(transport::DirectCall::kBroadcast, bytes);
    c.offer(direct, c.out);
    if (direct) {
      // The buffer stays valid until every rank has its copy.
      for (int m = 0; m < c.size; ++m) {
        if (m != root) c.await(m, use);
      }
    } else {
      const std::uint64_t last = inPieces(c);
      // Timed like the direct reads: until every rank has its copy (only to compare them).
      if (how == transport::DirectReads::kAuto) {
        for (int m = 0; m < c.size; ++m) {
          if (m != root) c.await(m, last);
        }
      }
    }
    c.g.recordDirect(transport::DirectCall::kBroadcast, bytes, direct,
                     std::chrono::steady_clock::now() - start);
    return;
  }
  c.begin();
  const Offer offer = c.offerOf(root, use);
  if (offer.direct) c.readFrom(root, offer.input, c.out, bytes);
  c.publish();
  if (!offer.direct) inPieces(c);
}

}  // namespace collx::algorithms::shared
