// barrier shm: every rank publishes one use of its group buffers (no payload) and waits
// until every other rank has published it.
//
// Steps: 1 store, P-1 loads of other ranks' epochs (one cache line each; the first look
// usually finds them). Bytes: 0. Cost: alpha_shm (a cache line's trip between cores).
//
// When ranks outnumber cores, the time is the scheduler's, not the cache's: member 0 waits
// for every arrival and then releases the others with a second use, so it leaves first
// and a rooted call at rank 0 that follows (the usual broadcast) finds its receivers
// already there instead of waiting for rank 0 to get a core. The second use does not slow
// the barrier itself, and a small broadcast after it becomes many times faster.
#include "../builders.h"
#include "shared.h"

namespace collx::algorithms::shm {

Step<> barrier(Call& c) {
  const std::uint64_t use = c.g.nextUse();
  co_await c.begin();
  c.publish();
  if (c.g.oversubscribed()) {
    // Member 0 gathers the arrivals and releases the others (a second use).
    if (c.me == 0) {
      for (int m = 1; m < c.size; ++m) co_await c.await(m, use);
    } else {
      co_await c.await(0, use + 1);
    }
    co_await c.begin();
    c.publish();
    co_return;
  }
  for (int m = 0; m < c.size; ++m) {
    if (m != c.me) co_await c.await(m, use);
  }
}

}  // namespace collx::algorithms::shm

namespace collx::algorithms {

const AlgorithmInfo kBarrierShm{
    .coll = Collective::kBarrier,
    .name = "shm",
    .summary = "one shared-memory flag per rank: one cache line's trip",
    .build = buildShared,
    .shared = true,
    .doc = {.rounds = "1; 2 when ranks outnumber cores",
            .perRank = "nothing",
            .cost = "alpha_shm (P-1 cache lines read); ranks outnumbering cores: member 0 reads "
                    "the P-1 arrivals and releases the others (2 alpha_shm), so it leaves first "
                    "and a rooted call at rank 0 after the barrier finds its receivers waiting",
            .restrictions = "every rank in one shared-memory group"}};

}  // namespace collx::algorithms
