// barrier shm: every rank publishes one use of its group buffers (no payload) and waits
// until every other rank has published it.
//
// Steps: 1 store, P-1 loads of other ranks' epochs (one cache line each; the first look
// usually finds them). Bytes: 0. Cost: alpha_shm (a cache line's trip between cores).
#include "shared.h"

namespace collx::algorithms::shared {

void barrier(Call& c) {
  const std::uint64_t use = c.g.nextUse();
  c.begin();
  c.publish();
  for (int m = 0; m < c.size; ++m) {
    if (m != c.me) c.await(m, use);
  }
}

}  // namespace collx::algorithms::shared
