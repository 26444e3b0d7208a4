// Harness: what a rank reads of a peer on its host before it maps and indexes the peer's
// arena: the address the peer published in the store (ShmDevice::parse), the peer's arena
// header (validatePeerHeader, with a header made of the fuzzed bytes) and Layout::of.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>

#include "fuzz.h"
#include "shm/arena.h"
#include "shm/shm_device.h"

namespace tr = collx::transport::shm;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // The address: any text.
  tr::ShmDevice::Published published;
  if (tr::ShmDevice::parse(std::string(collx::fuzz::textOf(data, size)), published)) {
    if (published.bytes > tr::kMaxArenaBytes || published.pid <= 0 || published.locator.empty())
      __builtin_trap();
  }
  // The header: the identity line from the input (the rest zero), what this rank expects from
  // the input's tail, and a published size that matches the header's layout or is fuzzed.
  tr::ArenaHeader header;
  std::memset(&header, 0, sizeof header);
  std::memcpy(&header, data, std::min(size, offsetof(tr::ArenaHeader, state)));
  tr::PeerExpectation expect;
  std::uint64_t publishedBytes = 0;
  const std::size_t tail = sizeof(std::int32_t) + sizeof(std::uint64_t);
  if (size >= offsetof(tr::ArenaHeader, state) + tail) {
    const std::uint8_t* more = data + offsetof(tr::ArenaHeader, state);
    std::memcpy(&expect.size, more, sizeof(std::int32_t));
    std::memcpy(&publishedBytes, more + sizeof(std::int32_t), sizeof(std::uint64_t));
  } else {
    expect.size = header.size;
  }
  // A mesh has at least this rank.
  if (expect.size < 1) return 0;
  // The header's own claims, except where the input said otherwise: so that the checks after
  // identity (ring size, layout) are reached.
  expect.rank = header.rank;
  expect.job = header.job;
  expect.generation = header.generation;
  expect.groupBytes = header.groupBytes;
  header.magic = (size > 0 && data[0] == 0xff) ? header.magic : tr::kArenaMagic;
  header.version = (size > 1 && data[1] == 0xff) ? header.version : tr::kArenaVersion;
  if (publishedBytes == 0)
    publishedBytes = tr::Layout::of(expect.size, header.ringBytes, header.groupBytes).total;
  tr::Layout layout;
  std::string why;
  if (tr::validatePeerHeader(header, expect, publishedBytes, layout, why)) {
    // What the rank then indexes: every ring and group buffer inside the published size.
    if (layout.total != publishedBytes || layout.total == 0) __builtin_trap();
    const std::size_t lastRing = layout.rings + layout.ringStride * (expect.size - 1);
    const std::size_t lastGroup =
        layout.groupBuffers + layout.groupStride * (tr::kGroupBuffers - 1);
    if (lastRing + layout.ringStride > layout.total ||
        lastGroup + layout.groupStride > layout.total)
      __builtin_trap();
    if (header.ringBytes > tr::kMaxRingBytes) __builtin_trap();
  } else if (why.empty() || why.size() > 1024) {
    __builtin_trap();
  }
  return 0;
}
