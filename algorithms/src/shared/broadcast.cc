// broadcast shm: the root copies the vector into its group buffers in pieces and publishes
// each; the other ranks copy each piece out as soon as it is published (and publish that
// they are done with it). The root runs up to 3 pieces ahead (4 buffers), so copying in and
// out overlap: pieces are an eighth of the vector (at least 8 KiB, at most B).
//   ceil(n / piece) uses; per rank: n bytes copied (root: in; others: out), concurrently.
#include <algorithm>

#include "shared.h"

namespace collx::algorithms::shared {

void broadcast(Call& c) {
  const std::uint64_t bytes = c.p.count * c.p.elementSize;
  const std::uint64_t B = std::min<std::uint64_t>(
      c.bufferBytes(), std::max<std::uint64_t>(8192, (bytes / 8 + 63) / 64 * 64));
  const int root = c.p.root;
  std::uint64_t off = 0;
  do {
    const std::uint64_t len = std::min(B, bytes - off);
    const std::uint64_t use = c.g.nextUse();
    std::uint8_t* mine = c.begin();
    if (c.me == root) {
      if (len > 0) std::memcpy(mine, c.out + off, len);
    } else {
      const std::uint8_t* theirs = c.await(root, use);
      if (len > 0) std::memcpy(c.out + off, theirs, len);
    }
    c.publish();
    off += len;
  } while (off < bytes);
}

}  // namespace collx::algorithms::shared
