// What a rank reads of its peers before trusting them (outside input), checked without any
// mapping or socket: a peer's shared-memory address and arena header, and the tcp pair's
// handshake and addresses.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "shm/arena.h"
#include "shm/shm_device.h"
#include "tcp/tcp_hello.h"

namespace collx::transport::shm {
namespace {

ArenaHeader headerOf(int rank, int size, std::uint64_t ringBytes, std::uint64_t groupBytes) {
  ArenaHeader h;
  std::memset(&h, 0, sizeof h);
  h.magic = kArenaMagic;
  h.version = kArenaVersion;
  h.rank = rank;
  h.size = size;
  h.job = 42;
  h.generation = 1;
  h.ringBytes = ringBytes;
  h.groupBytes = groupBytes;
  return h;
}

TEST(ShmHeader, RingsAreAtMostOneGibibyteAndLayoutsNeverOverflow) {
  const PeerExpectation expect{1, 4, 42, 1, 65536};
  Layout layout;
  std::string why;
  // The largest ring: accepted, and its layout is what the peer published.
  const std::uint64_t largest = Layout::of(4, kMaxRingBytes, 65536).total;
  EXPECT_TRUE(
      validatePeerHeader(headerOf(1, 4, kMaxRingBytes, 65536), expect, largest, layout, why))
      << why;
  EXPECT_EQ(layout.total, largest);
  // Powers of two beyond it: refused before any layout, whatever size the peer published
  // (2^62-byte rings times 4 ranks would wrap around).
  for (std::uint64_t ring : {kMaxRingBytes * 2, std::uint64_t{1} << 62, std::uint64_t{1} << 63}) {
    why.clear();
    EXPECT_FALSE(validatePeerHeader(headerOf(1, 4, ring, 65536), expect,
                                    Layout::of(4, ring, 65536).total, layout, why));
    EXPECT_NE(why.find("not a power of two in [4KiB, 1GiB]"), std::string::npos) << why;
  }
  EXPECT_EQ(Layout::of(4, std::uint64_t{1} << 62, 65536).total, 0u);
  EXPECT_EQ(Layout::of(1 << 30, std::uint64_t{1} << 40, 65536).total, 0u);
  EXPECT_EQ(Layout::of(2, 4096, ~std::uint64_t{0}).total, 0u);
  EXPECT_GT(Layout::of(2, 4096, 4096).total, 2 * 4096u);
  // Not an arena, another rank's, another job's, a size that is not its layout's.
  ArenaHeader stranger = headerOf(1, 4, 4096, 65536);
  stranger.magic = 0;
  EXPECT_FALSE(validatePeerHeader(stranger, expect, largest, layout, why));
  EXPECT_NE(why.find("not a collx arena"), std::string::npos) << why;
  EXPECT_FALSE(validatePeerHeader(headerOf(2, 4, 4096, 65536), expect,
                                  Layout::of(4, 4096, 65536).total, layout, why));
  EXPECT_NE(why.find("belongs to rank 2 of 4"), std::string::npos) << why;
  EXPECT_FALSE(validatePeerHeader(headerOf(1, 4, 4096, 65536), expect, largest, layout, why));
  EXPECT_NE(why.find("size does not match"), std::string::npos) << why;
}

TEST(ShmHeader, PublishedAddressesAreBoundedBeforeAnyMapping) {
  ShmDevice::Published p;
  const std::uint64_t smallest = Layout::of(1, 4096, 0).total;
  ASSERT_TRUE(ShmDevice::parse("abc.123.fd7." + std::to_string(smallest) + ".ff", p));
  EXPECT_EQ(p.pid, 123);
  EXPECT_EQ(p.locator, "fd7");
  EXPECT_EQ(p.bytes, smallest);
  EXPECT_TRUE(ShmDevice::parse("abc.123.ncollx-1." + std::to_string(kMaxArenaBytes) + ".ff", p));
  EXPECT_FALSE(ShmDevice::parse("abc.123.fd7." + std::to_string(smallest - 1) + ".ff", p));
  EXPECT_FALSE(ShmDevice::parse("abc.123.fd7." + std::to_string(kMaxArenaBytes + 1) + ".ff", p));
  EXPECT_FALSE(ShmDevice::parse("abc.123.fd7.18446744073709551615.ff", p));
  EXPECT_FALSE(ShmDevice::parse("abc.123.n/etc/passwd.65536.ff", p));
  EXPECT_FALSE(ShmDevice::parse("abc.123.fd 7.65536.ff", p));
  EXPECT_FALSE(ShmDevice::parse("abc.123." + std::string(300, 'n') + ".65536.ff", p));
  EXPECT_FALSE(ShmDevice::parse("abc.0.fd7.65536.ff", p));
  EXPECT_FALSE(ShmDevice::parse("abc.123.fd7.65536", p));
}

}  // namespace
}  // namespace collx::transport::shm

namespace collx::transport::tcp {
namespace {

Hello helloOf(int from, int to, std::uint32_t stream, std::uint32_t flags) {
  Hello h;
  std::memset(&h, 0, sizeof h);
  std::memcpy(h.magic, kHelloMagic, 4);
  h.version = kHelloVersion;
  h.job = 0x1234;
  h.generation = 1;
  h.from = from;
  h.to = to;
  h.stream = stream;
  h.streams = 2;
  h.flags = flags;
  return h;
}

TEST(PairHello, EachCheckRefusesWithItsStatus) {
  const HelloExpectation expect{0x1234, 1, 2, 2, false};
  EXPECT_EQ(checkHello(helloOf(3, 2, 1, 0), expect, true).status, kAckOk);
  Hello stranger = helloOf(3, 2, 1, 0);
  stranger.magic[0] = 'X';
  EXPECT_EQ(checkHello(stranger, expect, true).status, kNotCollx);
  Hello old = helloOf(3, 2, 1, 0);
  old.version = kHelloVersion - 1;
  EXPECT_EQ(checkHello(old, expect, true).status, kNotCollx);
  Hello otherJob = helloOf(3, 2, 1, 0);
  otherJob.generation = 2;
  EXPECT_EQ(checkHello(otherJob, expect, true).status, kAckWrongJob);
  EXPECT_EQ(checkHello(helloOf(3, 2, 1, 0), expect, false).status, kAckWrongRank);
  EXPECT_EQ(checkHello(helloOf(1, 2, 1, 0), expect, true).status, kAckWrongRank);
  EXPECT_EQ(checkHello(helloOf(3, 4, 1, 0), expect, true).status, kAckWrongRank);
  EXPECT_EQ(checkHello(helloOf(3, 2, 2, 0), expect, true).status, kAckBadStream);
  const HelloVerdict secret = checkHello(helloOf(3, 2, 0, kHoldsSecret), expect, true);
  EXPECT_EQ(secret.status, kAckSecretMismatch);
  EXPECT_NE(secret.why.find("holds a job secret; this rank has none"), std::string::npos);
}

TEST(PairHello, AddressesAreWholePortsAndErrorsShowLittle) {
  const Where where{0, "tcp", 1};
  EXPECT_EQ(parseEndpoint("10.0.0.2:4321", where).port(), 4321);
  EXPECT_EQ(parseEndpoint("[::1]:29500", where).address().to_string(), "::1");
  // atoi read these as ports: "80x" as 80, and more digits than an int holds as anything.
  EXPECT_THROW(parseEndpoint("10.0.0.2:80x", where), InvalidArgument);
  EXPECT_THROW(parseEndpoint("10.0.0.2:4294967377", where), InvalidArgument);
  EXPECT_THROW(parseEndpoint("10.0.0.2:+80", where), InvalidArgument);
  EXPECT_THROW(parseEndpoint("10.0.0.2:0", where), InvalidArgument);
  EXPECT_THROW(parseEndpoint("10.0.0.2", where), InvalidArgument);
  try {
    parseEndpoint(std::string(5000, '1') + ":1", where);
    ADD_FAILURE() << "accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("... (5002 bytes)"), std::string::npos) << e.what();
    EXPECT_LT(std::string(e.what()).size(), 500u);
  }
}

}  // namespace
}  // namespace collx::transport::tcp
