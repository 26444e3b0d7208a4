// allgather shm: in pieces of B bytes of each rank's block, each rank copies its piece into
// its group buffer and publishes; each then copies every other rank's piece out.
//   ceil(n / B) uses (n: one rank's block); per rank: n copied in, (P-1) n copied out.
#include <algorithm>

#include "shared.h"

namespace collx::algorithms::shared {

void allgather(Call& c) {
  const std::uint64_t block = c.p.count * c.p.elementSize;
  const std::uint64_t B = c.bufferBytes();
  std::uint8_t* own = c.out + block * static_cast<std::uint64_t>(c.me);
  std::uint64_t off = 0;
  do {
    const std::uint64_t len = std::min(B, block - off);
    const std::uint64_t use = c.g.nextUse();
    std::uint8_t* mine = c.begin();
    if (len > 0) copyBytes(mine, c.in + off, len);
    c.publish();
    if (len > 0 && own != c.in) copyBytes(own + off, c.in + off, len);
    for (int m = 0; m < c.size; ++m) {
      if (m == c.me) continue;
      const std::uint8_t* theirs = c.await(m, use);
      if (len > 0) copyBytes(c.out + block * static_cast<std::uint64_t>(m) + off, theirs, len);
    }
    off += len;
  } while (off < block);
}

}  // namespace collx::algorithms::shared
