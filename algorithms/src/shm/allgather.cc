// allgather shm: in pieces of B bytes of each rank's block, each rank copies its piece into
// its group buffer and publishes; each then copies every other rank's piece out.
//   ceil(n / B) uses (n: one rank's block); per rank: n copied in, (P-1) n copied out.
// From 16 KiB gathered, when every rank can read every other's memory
// (SharedGroup::directReads), a first use carries each rank's block address and member 0's
// choice (SharedGroup::chooseDirect): the pieces above, or direct reads: every rank copies
// every other's block straight out of that rank's own buffer (process_vm_readv, one copy),
// publishes, and returns once all have.
//   direct: 2 uses; per rank: (P-1) n read (and its own block copied, unless in place).
#include <algorithm>

#include "../builders.h"
#include "shared.h"

namespace collx::algorithms::shm {

namespace {

constexpr std::uint64_t kDirectMin = 16 * kKiB, kDirectOversubscribedMin = 1 << 20;

// From 4 MiB gathered, blocks go into the output with non-temporal stores (copyStreaming),
// which leave the group buffers and the input in the cache (the call does not read its
// output again). Up to 2 MiB it makes no difference; from 4 MiB it is faster through the
// group buffers, about twice as fast from 8 MiB, and a little faster by direct reads. (Not
// so for a P=2 broadcast or allreduce, whose plain copies stayed faster: broadcast streams
// only when ranks outnumber cores.)
constexpr std::uint64_t kStreamMin = 4 << 20;

Step<> inPieces(Call& c) {
  const std::uint64_t block = c.p.count * c.p.elementSize;
  const std::uint64_t B = c.bufferBytes();
  const bool stream = block * static_cast<std::uint64_t>(c.size) >= kStreamMin;
  std::uint8_t* own = c.out + block * static_cast<std::uint64_t>(c.me);
  std::uint64_t off = 0;
  do {
    const std::uint64_t len = std::min(B, block - off);
    const std::uint64_t use = c.g.nextUse();
    std::uint8_t* mine = co_await c.begin();
    if (len > 0) copyBytes(mine, c.in + off, len);
    c.publish();
    if (len > 0 && own != c.in) copyOut(own + off, c.in + off, len, stream);
    for (int m = 0; m < c.size; ++m) {
      if (m == c.me) continue;
      const std::uint8_t* theirs = co_await c.await(m, use);
      if (len > 0) {
        copyOut(c.out + block * static_cast<std::uint64_t>(m) + off, theirs, len, stream);
      }
    }
    off += len;
  } while (off < block);
}

// Every rank copies every other's block out of that rank's input, after the first use
// (`use`) carried every member's offer, publishes, and returns once all have.
Step<> directReads(Call& c, std::uint64_t use) {
  const std::uint64_t block = c.p.count * c.p.elementSize;
  std::uint8_t* own = c.out + block * static_cast<std::uint64_t>(c.me);
  if (own != c.in)
    copyOut(own, c.in, block, block * static_cast<std::uint64_t>(c.size) >= kStreamMin);
  for (int k = 1; k < c.size; ++k) {  // each from its next member on, to spread the reads
    const int m = (c.me + k) % c.size;
    const Offer offer = Call::offerIn(co_await c.await(m, use));
    c.readFrom(m, offer.input, c.out + block * static_cast<std::uint64_t>(m), block);
  }
  co_await c.begin();
  c.publish();
  // Every member's block stays valid until all have read it.
  for (int m = 0; m < c.size; ++m) {
    if (m != c.me) co_await c.await(m, use + 1);
  }
}

}  // namespace

// (Not a coroutine itself: it hands over the one the call takes.)
Step<> allgather(Call& c) {
  const std::uint64_t block = c.p.count * c.p.elementSize;
  const std::uint64_t bytes = block * static_cast<std::uint64_t>(c.size);
  // From 16 KiB gathered: the pieces' copies out of lines a peer has just written slow down
  // the most when the cores hand data over slowly (3-4x), the direct reads of its input
  // barely; in the good periods the pieces are a little faster, and auto, timing both, keeps
  // to them then. When ranks outnumber cores, from 1 MiB gathered and up to 4 ranks: there
  // too the pieces can win in a good period, and the direct reads keep their speed in a slow
  // one.
  if (!c.mayReadDirectly(bytes, kDirectMin, kDirectOversubscribedMin)) return inPieces(c);
  return c.ledByMemberZero(
      transport::DirectCall::kAllgather, bytes,
      [&c](std::uint64_t use) { return directReads(c, use); }, [&c] { return inPieces(c); });
}

}  // namespace collx::algorithms::shm

namespace collx::algorithms {

const AlgorithmInfo kAllgatherShm{
    .coll = Collective::kAllgather,
    .name = "shm",
    .summary =
        "through shared-memory buffers: each rank publishes its block, copies every other one",
    .build = buildShared,
    .shared = true,
    .doc = {.rounds = "1 per B bytes of a block; from 16 KiB gathered a first use carries member "
                      "0's choice, and direct reads take 1 more",
            .perRank = "n in, (P-1) n out; direct reads: (P-1) n read out of the other ranks' own "
                       "buffers, its own block copied (unless in place)",
            .cost = "ceil(n/B) alpha_shm + P n c; direct: 2 alpha_shm + (P-1) n c_cma + n c",
            .restrictions =
                "every rank in one shared-memory group; COLLX_SHM_DIRECT as for broadcast (member "
                "0 times the ways; when ranks outnumber cores from 1 MiB gathered, up to 4 "
                "ranks)"}};

}  // namespace collx::algorithms
