// allreduce shm: through the ranks' group buffers (B bytes each).
//
// Up to kOneShotBytes (one-shot): each rank copies its vector into its buffer and
// publishes; each then reduces all P buffers, in rank order, into its output.
//   1 use; bytes copied per rank: n in, reads P n; reductions: (P-1) n elements.
// Larger (two-shot, in rounds of B bytes): each rank copies the round's piece of its vector
// into a buffer, but for its own slice, which only it reads (from its input), and
// publishes; rank i reduces slice i of the piece (1/P of it) from all P ranks, in rank
// order, into a second buffer and publishes; each rank copies every slice into its output.
// The buffers are cache-sized, so the pieces move between caches and the memory traffic
// per rank is close to reading the input and writing the output once.
//   2 uses per round; per rank: (P-1) n / P copied in, n read for the reduction, n/P
//   written, n copied out; (P-1) n / P elements reduced.
// From kDirectMin, when every rank can read every other's memory (SharedGroup::directReads),
// a first use carries each rank's input and output addresses and member 0's choice
// (SharedGroup::chooseDirect): the rounds above, or direct reads: rank i reduces slice i in
// chunks of 4 MiB / P bytes, 64 KiB to 1 MiB (1 MiB up to P = 4), reading every other rank's
// part of the chunk out of that rank's input into its own cache (process_vm_readv), in rank order
// into its output, and publishes; then it reads every other rank's reduced slice out of that rank's
// output into its own, publishes, and returns once all have. Nothing moves through the group
// buffers and nothing is read that another core has just written, so the time stays the same when
// this VM's cores hand data to each other slowly.
//   3 uses; per rank: (P-1) n / P read for the reduction, (P-1) n / P read of the results;
//   (P-1) n / P elements reduced.
// Every element is reduced by one rank in rank order: bit-identical results everywhere.
#include <algorithm>
#include <vector>

#include "../builders.h"
#include "shared.h"

namespace collx::algorithms::shm {

namespace {
// One-shot saves two-shot's second use, but every rank reads P whole vectors and reduces
// all of them. At P = 2 two-shot was ahead at 4 KiB already, and more so above (smaller
// vectors were not compared).
constexpr std::uint64_t kOneShotBytes = 4 * kKiB;

// Direct reads from 256 KiB, in chunks of 4 MiB / P from 64 KiB to 1 MiB: fewer, larger
// reads cost less per byte (P = 2 on an AMD EPYC VM, 2026-11-28, interleaved against chunks
// of 256 KiB: 1 MiB 107 against 117 us, 4 MiB 408 against 449 us; chunks of 64 KiB were
// slower still), and the scratch they fill stays at most 4 MiB.
constexpr std::uint64_t kDirectMin = 256 * kKiB, kDirectScratch = 4 << 20;
constexpr std::uint64_t kDirectChunkMin = 64 * kKiB, kDirectChunkMax = 1 << 20;
constexpr std::uint64_t kDirectOversubscribedMin = 32 << 20;

// Direct reads, after the first use (`use`) carried every member's offer.
Step<> directReads(Call& c, std::uint64_t use) {
  const std::uint64_t es = c.p.elementSize;
  const std::uint64_t n = c.p.count;
  const auto P = static_cast<std::uint64_t>(c.size);
  const auto me = static_cast<std::uint64_t>(c.me);
  std::vector<Offer>& offers = c.scratch.offers;
  std::vector<std::uint8_t>& scratch = c.scratch.bytes;
  offers.resize(P);
  std::vector<const std::uint8_t*>& src = c.sources();
  for (int m = 0; m < c.size; ++m) {
    offers[static_cast<std::size_t>(m)] = Call::offerIn(co_await c.await(m, use));
  }
  const std::uint64_t chunkBytes =
      std::clamp<std::uint64_t>(kDirectScratch / P, kDirectChunkMin, kDirectChunkMax);
  const std::uint64_t chunk = std::max<std::uint64_t>(1, chunkBytes / es);
  scratch.resize(chunk * es * P);
  const std::uint64_t lo = n * me / P, hi = n * (me + 1) / P;
  // In place, this rank's input is its output: from the third rank on, the reduction would
  // overwrite it before reading it (ranks 0 and 1 go element by element into the first).
  const bool copyOwn = c.in == c.out && c.me >= 2;
  for (std::uint64_t off = lo; off < hi; off += chunk) {
    const std::uint64_t len = std::min(chunk, hi - off);
    for (std::uint64_t k = 1; k < P; ++k) {  // each from its next member on
      const auto m = static_cast<std::size_t>((me + k) % P);
      std::uint8_t* to = scratch.data() + m * chunk * es;
      c.readFrom(static_cast<int>(m), offers[m].input + off * es, to, len * es);
      src[m] = to;
    }
    if (copyOwn) {
      std::uint8_t* to = scratch.data() + me * chunk * es;
      copyBytes(to, c.in + off * es, len * es);
      src[me] = to;
    } else {
      src[me] = c.in + off * es;
    }
    c.reduceAll(c.out + off * es, src.data(), 0, len);
  }
  co_await c.begin();
  c.publish();
  for (std::uint64_t k = 1; k < P; ++k) {
    const auto m = (me + k) % P;
    const std::uint64_t mlo = n * m / P, mhi = n * (m + 1) / P;
    co_await c.await(static_cast<int>(m), use + 1);
    if (mhi > mlo) {
      c.readFrom(static_cast<int>(m), offers[m].output + mlo * es, c.out + mlo * es,
                 (mhi - mlo) * es);
    }
  }
  co_await c.begin();
  c.publish();
  // Every member's output stays valid until all have read it.
  for (int m = 0; m < c.size; ++m) {
    if (m != c.me) co_await c.await(m, use + 2);
  }
}

// Two-shot through the group buffers.
Step<> inRounds(Call& c) {
  const std::uint64_t es = c.p.elementSize;
  const std::uint64_t n = c.p.count;
  std::vector<const std::uint8_t*>& src = c.sources();
  const std::uint64_t perRound = c.bufferBytes() / es;
  const auto P = static_cast<std::uint64_t>(c.size);
  const auto me = static_cast<std::uint64_t>(c.me);
  for (std::uint64_t off = 0; off < n; off += perRound) {
    const std::uint64_t len = std::min(perRound, n - off);
    const std::uint64_t lo = len * me / P, hi = len * (me + 1) / P;
    const std::uint64_t pieces = c.g.nextUse();
    std::uint8_t* mine = co_await c.begin();
    const std::uint8_t* piece = c.in + off * es;
    copyBytes(mine, piece, lo * es);
    copyBytes(mine + hi * es, piece + hi * es, (len - hi) * es);
    c.publish();
    for (int m = 0; m < c.size; ++m) {
      src[static_cast<std::size_t>(m)] = m == c.me ? piece : co_await c.await(m, pieces);
    }
    const std::uint64_t slices = c.g.nextUse();
    std::uint8_t* slice = co_await c.begin();
    c.reduceAll(slice, src.data(), lo * es, hi - lo);
    c.publish();
    for (int m = 0; m < c.size; ++m) {
      const auto mm = static_cast<std::uint64_t>(m);
      const std::uint64_t mlo = len * mm / P, mhi = len * (mm + 1) / P;
      const std::uint8_t* theirs = co_await c.await(m, slices);
      if (mhi > mlo) copyBytes(c.out + (off + mlo) * es, theirs, (mhi - mlo) * es);
    }
  }
}

// One use: every rank reduces every rank's vector.
Step<> oneShot(Call& c) {
  const std::uint64_t n = c.p.count;
  const std::uint64_t bytes = n * c.p.elementSize;
  std::vector<const std::uint8_t*>& src = c.sources();
  const std::uint64_t use = c.g.nextUse();
  std::uint8_t* mine = co_await c.begin();
  if (bytes > 0) copyBytes(mine, c.in, bytes);
  c.publish();
  for (int m = 0; m < c.size; ++m) src[static_cast<std::size_t>(m)] = co_await c.await(m, use);
  c.reduceAll(c.out, src.data(), 0, n);
}

}  // namespace

// (Not a coroutine itself: it hands over the one the call takes.)
Step<> allreduce(Call& c) {
  const std::uint64_t bytes = c.p.count * c.p.elementSize;
  if (bytes <= std::min<std::uint64_t>(kOneShotBytes, c.bufferBytes())) return oneShot(c);
  // When ranks outnumber cores, only from 32 MiB and up to 4 ranks: there the group buffers
  // are about twice as fast as direct reads in the good periods and slower in the slow ones,
  // so auto's timing has a choice to make; at P = 8 the direct reads never won.
  if (c.mayReadDirectly(bytes, kDirectMin, kDirectOversubscribedMin)) {
    return c.ledByMemberZero(
        transport::DirectCall::kAllreduce, bytes,
        [&c](std::uint64_t use) { return directReads(c, use); }, [&c] { return inRounds(c); });
  }
  return inRounds(c);
}

}  // namespace collx::algorithms::shm

namespace collx::algorithms {

const AlgorithmInfo kAllreduceShm{
    .coll = Collective::kAllreduce,
    .name = "shm",
    .summary =
        "through shared-memory buffers: one-shot (each rank reduces every rank's vector) up to "
        "4 KiB, then reduce-scatter + allgather in cache-sized rounds; rank-order reduction",
    .build = buildShared,
    .keepsOrder = true,
    .shared = true,
    .doc = {.rounds = "up to 4 KiB: 1; then 2 per B bytes; direct reads: 3",
            .perRank = "one-shot: n in, P n read, (P-1) n reduced; two-shot: (P-1)/P n in (not its "
                       "own slice), n read and n/P written by the reduction, n out; direct reads: "
                       "rank i reads slice i of every other rank's input in chunks of 4 MiB / P "
                       "(64 KiB to 1 MiB) into "
                       "its cache and reduces it in rank order into its output, then reads every "
                       "other rank's reduced slice out of that rank's output: (P-1)/P n read twice",
            .cost = "one-shot: alpha_shm + (P+1) n c + (P-1) n gamma; two-shot: 2 ceil(n/B) "
                    "alpha_shm + (3 - 1/P) n c + (P-1)/P n gamma; direct: 3 alpha_shm + 2 (P-1)/P "
                    "n c_cma + n/P c + (P-1)/P n gamma",
            .restrictions = "every rank in one shared-memory group"}};

}  // namespace collx::algorithms
