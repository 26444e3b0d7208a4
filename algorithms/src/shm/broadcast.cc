// broadcast shm: the root copies the vector into its group buffers in pieces and publishes
// each; the other ranks copy each piece out as soon as it is published (and publish that
// they are done with it). The root runs up to 3 pieces ahead (4 buffers), so copying in and
// out overlap. Two ranks: up to 256 KiB, pieces of a sixteenth (at least 4 KiB), so that the
// one reader starts early; above, whole buffers of B: there fewer pieces, so fewer uses, did
// better (both beat eighths, and B beat 32nds). More ranks: eighths (at least 8 KiB, at most
// B); halves when ranks outnumber cores.
//   ceil(n / piece) uses; per rank: n bytes copied (root: in; others: out), concurrently.
// From 64 KiB, when every rank can read every other's memory (SharedGroup::directReads), a
// first use carries the root's choice (SharedGroup::chooseDirect): the pieces above, or
// direct reads, and for those a second choice (DirectCall::kBroadcastSplit):
//   - whole: every other rank copies the whole vector out of the root's own buffer
//     (process_vm_readv, one copy) and publishes; the root returns once all have.
//     1 use; per rank but the root: n bytes read from the root's buffer.
//   - split: every other rank publishes at once and reads a head (half the vector up to 256
//     KiB, a quarter above) out of the root's buffer, while the root copies the tail into
//     its group buffers in pieces of B; the others then copy the tail out. Both cores copy
//     at once, and the tail has sat a while in the root's cache before it is read.
//     1 + ceil(tail / B) uses; the root: the tail in; the others: head read, tail out.
// (Reading lines the root wrote long ago, not lines it has just written into its group
// buffers: on a VM whose cores at times hand data to each other 2-5x slower, those copies
// keep their speed; in the good periods the pieces are 2-3x faster, so auto times both.
// Split is the fastest of the three in the good periods at the sizes it was tried at (256
// KiB and 1 MiB); in a slow one its tail through the group buffers slows it down nearly as
// much as the pieces, and auto then reads whole vectors.)
#include <algorithm>
#include <chrono>
#include <cstring>

#include "../builders.h"
#include "shared.h"

namespace collx::algorithms::shm {

namespace {

constexpr std::uint64_t kDirectMin = 64 * kKiB, kDirectOversubscribedMin = 4 << 20;
constexpr std::uint64_t kStreamMin = 4 << 20;

// `last`, when given: the last use.
Step<> inPieces(Call& c, std::uint64_t* last = nullptr) {
  const std::uint64_t bytes = c.p.count * c.p.elementSize;
  // Two ranks: many small pieces up to 256 KiB, then whole buffers. More: eighths, fewer
  // pieces for ranks that may wait for a core to be given one. Ranks outnumbering cores:
  // halves, as every piece may cost a reader a wait for a core (halves beat eighths there,
  // the more so the more ranks share a core). (Every rank computes the same pieces: the
  // group agreed on oversubscribed().)
  const std::uint64_t parts = c.g.oversubscribed() ? 2 : c.size <= 2 ? 16 : 8;
  const std::uint64_t B =
      c.size <= 2 && bytes > 256 * kKiB
          ? c.bufferBytes()
          : std::min<std::uint64_t>(
                c.bufferBytes(),
                std::max<std::uint64_t>(c.size <= 2 ? 4096 : 8192, (bytes / parts + 63) / 64 * 64));
  const int root = c.p.root;
  // Ranks outnumbering cores, from 4 MiB: the pieces go into the outputs with non-temporal
  // stores (copyStreaming), which leave the group buffers in the cache that the ranks
  // sharing a core take turns on. (With a core per rank, plain copies stayed faster.)
  const bool stream = c.g.oversubscribed() && bytes >= kStreamMin;
  std::uint64_t off = 0;
  std::uint64_t use = 0;
  do {
    const std::uint64_t len = std::min(B, bytes - off);
    use = c.g.nextUse();
    std::uint8_t* mine = co_await c.begin();
    if (c.me == root) {
      if (len > 0) copyBytes(mine, c.out + off, len);
    } else {
      const std::uint8_t* theirs = co_await c.await(root, use);
      if (len > 0) copyOut(c.out + off, theirs, len, stream);
    }
    c.publish();
    off += len;
  } while (off < bytes);
  if (last != nullptr) *last = use;
}

// Split direct reads: the bytes of the vector read directly (the rest goes through the
// root's group buffers): half up to 256 KiB, a quarter above. At P = 2 any head of 40-60%
// did alike up to 256 KiB; from 1 MiB the smaller heads did better, a quarter best at 4
// MiB; reading the whole vector directly was the slowest at every size.
std::uint64_t headOf(std::uint64_t bytes) {
  return (bytes <= 256 * kKiB ? bytes / 2 : bytes / 4) / 64 * 64;
}

// Bytes [head, bytes) in pieces of B through the root's group buffers: the root copies each
// in and publishes it, every other rank copies it out and publishes that it did. Returns
// the last use.
Step<std::uint64_t> tailThroughBuffers(Call& c, std::uint64_t head, std::uint64_t bytes) {
  const int root = c.p.root;
  std::uint64_t use = 0;
  for (std::uint64_t off = head; off < bytes;) {
    const std::uint64_t len = std::min(c.bufferBytes(), bytes - off);
    use = c.g.nextUse();
    std::uint8_t* mine = co_await c.begin();
    if (c.me == root) {
      copyBytes(mine, c.out + off, len);
    } else {
      copyBytes(c.out + off, co_await c.await(root, use), len);
    }
    c.publish();
    off += len;
  }
  co_return use;
}

// The root's first use offers direct reads, or not.
Step<> offeringDirectReads(Call& c) {
  const std::uint64_t bytes = c.p.count * c.p.elementSize;
  const transport::DirectReads how = c.g.directReads();
  const int root = c.p.root;
  const auto start = std::chrono::steady_clock::now();
  const std::uint64_t use = c.g.nextUse();
  const std::uint64_t head = headOf(bytes);
  if (c.me == root) {
    using transport::DirectCall;
    const bool direct = c.g.chooseDirect(DirectCall::kBroadcast, bytes);
    // (Split reads not when ranks outnumber cores: the root shares its core with a reader.)
    const bool split =
        direct && !c.g.oversubscribed() && c.g.chooseDirect(DirectCall::kBroadcastSplit, bytes);
    co_await c.offer(split ? Way::kSplit : direct ? Way::kDirect : Way::kBuffers, c.out);
    // The last use every other rank publishes: by then it has its copy and reads nothing of
    // the root's any more. Direct reads wait for it (the buffer stays valid until then);
    // the group buffers' way only under auto, to time the whole call.
    std::uint64_t last = use;
    if (split) {
      last = co_await tailThroughBuffers(c, head, bytes);
    } else if (!direct) {
      co_await inPieces(c, &last);
    }
    if (direct || how == transport::DirectReads::kAuto) {
      for (int m = 0; m < c.size; ++m) {
        if (m != root) co_await c.await(m, last);
      }
    }
    const auto took = std::chrono::steady_clock::now() - start;
    c.g.recordDirect(DirectCall::kBroadcast, bytes, direct, took);
    if (direct) c.g.recordDirect(DirectCall::kBroadcastSplit, bytes, split, took);
    co_return;
  }
  co_await c.begin();
  const Offer offer = Call::offerIn(co_await c.await(root, use));
  if (offer.way == Way::kSplit) {
    c.publish();  // the root may fill its group buffers with the tail meanwhile
    c.readFrom(root, offer.input, c.out, head);
    co_await tailThroughBuffers(c, head, bytes);
    co_return;
  }
  if (offer.direct()) c.readFrom(root, offer.input, c.out, bytes);
  c.publish();
  if (!offer.direct()) co_await inPieces(c);
}

}  // namespace

// (Not a coroutine itself: it hands over the one the call takes.)
Step<> broadcast(Call& c) {
  const std::uint64_t bytes = c.p.count * c.p.elementSize;
  // Ranks outnumbering cores (unless always): only from 4 MiB, up to 4 ranks, and whole
  // vectors. Below, the root's wait for every reader costs more than the pieces, and the
  // root's timing led auto astray. From 4 MiB, the pieces take 3-4x longer in this VM's
  // slow periods, the direct reads do not, and auto keeps to the faster way.
  if (!c.mayReadDirectly(bytes, kDirectMin, kDirectOversubscribedMin)) {
    return inPieces(c);
  }
  return offeringDirectReads(c);
}

}  // namespace collx::algorithms::shm

namespace collx::algorithms {

const AlgorithmInfo kBroadcastShm{
    .coll = Collective::kBroadcast,
    .name = "shm",
    .summary = "through the root's shared-memory buffers, pipelined in cache-sized pieces",
    .build = buildShared,
    .shared = true,
    .doc = {
        .rounds =
            "1 per piece (P = 2: n/16 up to 256 KiB, then B; P > 2: n/8, at least 8 KiB, at most "
            "B; ranks outnumbering cores: n/2); from 64 KiB a first use carries the root's choice, "
            "and direct reads take that 1 use only, or split, 1 + ceil(tail / B)",
        .perRank = "the root: n in; the others: n out (the root runs up to 3 pieces ahead); direct "
                   "reads: the others n each, out of the root's own buffer (process_vm_readv), the "
                   "root nothing; split: the others read a head (n/2 up to 256 KiB, n/4 above) "
                   "while the root copies the tail in, then copy the tail out",
        .cost =
            "(pieces) alpha_shm + n c + (one piece) c, pipelined; (direct) 2 alpha_shm + n c_cma",
        .restrictions = "every rank in one shared-memory group; any root; COLLX_SHM_DIRECT: auto "
                        "(the root times both ways per size and takes the faster, trying the "
                        "other one call in 16; when ranks outnumber cores only from 4 MiB, up to "
                        "4 ranks, and whole vectors), never, always; direct only where every rank "
                        "can read every other's memory (agreed at connect)"}};

}  // namespace collx::algorithms
