// broadcast shm: the root copies the vector into its group buffers in pieces and publishes
// each; the other ranks copy each piece out as soon as it is published (and publish that
// they are done with it). The root runs up to 3 pieces ahead (4 buffers), so copying in and
// out overlap. Two ranks: up to 256 KiB, pieces of a sixteenth (at least 4 KiB), above, of
// B (measured: 64 KiB 5.5 us against 7.5 in eighths; 1 MiB 58 us in pieces of 256 KiB
// against 99 in eighths and 121 in 32nds). More ranks: eighths (at least 8 KiB, at most B);
// halves when ranks outnumber cores.
//   ceil(n / piece) uses; per rank: n bytes copied (root: in; others: out), concurrently.
#include <algorithm>

#include "shared.h"

namespace collx::algorithms::shared {

void broadcast(Call& c) {
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
  do {
    const std::uint64_t len = std::min(B, bytes - off);
    const std::uint64_t use = c.g.nextUse();
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
}

}  // namespace collx::algorithms::shared
