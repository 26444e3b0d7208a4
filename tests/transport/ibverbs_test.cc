// The ibverbs transport alone, on the userspace verbs device (tests/verbs_emu): meshes of
// ranks as threads connected by hand (no store). Every protocol path (eager SENDs, announced
// messages written by RDMA WRITE WITH IMMEDIATE, early messages, slot credit under many small
// messages), the choice of transport, mismatches, failures on both sides and a peer that
// closes, and nothing left behind. The registration cache: hits, invalidation when memory is
// freed, mapped again or dropped, the bound, and its monitor.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "collx/base/error.h"
#include "collx/secure/job_secret.h"
#include "collx/transport/mesh.h"
#include "ibverbs/memory_monitor.h"
#include "ibverbs/registrations.h"
#include "ibverbs/verbs_api.h"
#include "util/meshes.h"

namespace collx::transport {
namespace {

using namespace std::chrono_literals;

using test::Done;

MeshOptions optionsFor(int rank, int size, std::string transport = "ibverbs") {
  MeshOptions o;
  o.rank = rank;
  o.size = size;
  o.jobId = "ibverbs-test";
  o.tcp.routeHost = "127.0.0.1";
  o.transport = std::move(transport);
  o.ib.library = COLLX_VERBS_EMU_PATH;
  o.ib.eagerLimit = 4096;
  return o;
}

using Tweak = std::function<void(MeshOptions&)>;

std::vector<std::unique_ptr<Mesh>> connectAll(int size, const Tweak& tweak = nullptr) {
  std::vector<MeshOptions> options;
  for (int r = 0; r < size; ++r) {
    options.push_back(optionsFor(r, size));
    if (tweak) tweak(options.back());
  }
  return test::connectMeshes(options);
}

bool driveAll(std::vector<std::unique_ptr<Mesh>>& meshes, const std::vector<Done*>& requests,
              std::chrono::milliseconds limit = 20s) {
  auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    bool all = true;
    for (Done* r : requests) all = all && r->finished;
    if (all) return true;
    for (auto& m : meshes) {
      if (!m || m->failure()) continue;  // a failed mesh only rethrows its error
      try {
        m->progress(std::chrono::microseconds(0));
      } catch (const Error&) {
        // the requests in flight carry the error
      }
    }
  }
  return false;
}

std::unique_ptr<Done> request(Request::Kind kind, int peer, void* data, std::uint64_t length,
                              std::uint32_t step = 1) {
  auto r = std::make_unique<Done>();
  r->kind = kind;
  r->peer = peer;
  r->data = data;
  r->length = length;
  r->key = MessageKey{7, step, Space::kPointToPoint};
  return r;
}

// Every rank sends `bytes` to the next and receives from the previous; receives posted
// first or last.
void exchangeRing(std::vector<std::unique_ptr<Mesh>>& meshes, std::uint64_t bytes,
                  bool receivesFirst) {
  const int size = static_cast<int>(meshes.size());
  std::vector<std::vector<std::uint8_t>> out(size), in(size);
  std::vector<std::unique_ptr<Done>> owned;
  std::vector<Done*> all;
  for (int r = 0; r < size; ++r) {
    out[r].resize(bytes);
    for (std::uint64_t i = 0; i < bytes; ++i) out[r][i] = static_cast<std::uint8_t>(i * 31 + r);
    in[r].assign(bytes, 0);
  }
  auto postRecvs = [&] {
    for (int r = 0; r < size; ++r) {
      owned.push_back(request(Request::Kind::kRecv, (r + size - 1) % size, in[r].data(), bytes));
      meshes[r]->post(*owned.back());
      all.push_back(owned.back().get());
    }
  };
  if (receivesFirst) postRecvs();
  for (int r = 0; r < size; ++r) {
    owned.push_back(request(Request::Kind::kSend, (r + 1) % size, out[r].data(), bytes));
    meshes[r]->post(*owned.back());
    all.push_back(owned.back().get());
  }
  if (!receivesFirst) postRecvs();
  ASSERT_TRUE(driveAll(meshes, all)) << bytes << " bytes";
  for (Done* d : all) EXPECT_EQ(d->error, "");
  for (int r = 0; r < size; ++r) {
    EXPECT_EQ(in[r], out[(r + size - 1) % size]) << "rank " << r << ", " << bytes << " bytes";
  }
}

TEST(Ibverbs, PairsAreIbverbsAndSay) {
  auto meshes = connectAll(3);
  for (int r = 0; r < 3; ++r) {
    for (int p = 0; p < 3; ++p) {
      if (p == r) continue;
      EXPECT_EQ(meshes[r]->transportNames()[p], "ibverbs");
      EXPECT_NE(meshes[r]->describePeer(p).find("ibverbs emu0:1"), std::string::npos)
          << meshes[r]->describePeer(p);
    }
  }
}

class IbverbsSizes : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(IbverbsSizes, RingExchangesArriveWhole) {
  const auto [size, receivesFirst] = GetParam();
  auto meshes = connectAll(size);
  // 0, eager (up to 4096), announced (one write, several writes of the 1 MiB pieces below).
  for (std::uint64_t bytes :
       {0ull, 1ull, 4095ull, 4096ull, 4097ull, 65536ull, 1ull << 20, (5ull << 20) + 3}) {
    exchangeRing(meshes, bytes, receivesFirst);
  }
}

INSTANTIATE_TEST_SUITE_P(Ibverbs, IbverbsSizes,
                         ::testing::Combine(::testing::Values(2, 3, 4, 8), ::testing::Bool()));

TEST(Ibverbs, InfiniBandPortsAreAddressedByLid) {
  // The device as an InfiniBand port (COLLX_VERBS_EMU_LINK=ib): a LID, no RoCE GID; queue
  // pairs reach each other by LID without a GRH (the device refuses one).
  ::setenv("COLLX_VERBS_EMU_LINK", "ib", 1);
  struct Unset {
    ~Unset() { ::unsetenv("COLLX_VERBS_EMU_LINK"); }
  } unset;
  auto meshes = connectAll(3);
  EXPECT_EQ(meshes[0]->transportNames()[1], "ibverbs");
  const std::string address = meshes[0]->address();
  // "ibverbs=<lid>-<mtu>-<global>-...": a LID, MTU 4096 (5), no GRH.
  const auto at = address.find("ibverbs=");
  ASSERT_NE(at, std::string::npos) << address;
  EXPECT_GT(std::stoi(address.substr(at + 8, address.find('-', at) - at - 8)), 0) << address;
  EXPECT_NE(address.find("-5-0-", at), std::string::npos) << address;
  for (std::uint64_t bytes : {100ull, 300000ull}) exchangeRing(meshes, bytes, false);
}

TEST(Ibverbs, ManySmallMessagesBeforeTheirReceivesUseCreditNotRnr) {
  // 500 eager messages, far more than the 32 slots, all before any receive is posted: the
  // sender waits for slots the receiver hands back, and every message arrives in order.
  auto meshes = connectAll(2);
  constexpr int kMessages = 500;
  std::vector<std::uint32_t> out(kMessages), in(kMessages, 0);
  std::vector<std::unique_ptr<Done>> owned;
  std::vector<Done*> all;
  for (int i = 0; i < kMessages; ++i) {
    out[i] = 1000 + i;
    owned.push_back(request(Request::Kind::kSend, 1, &out[i], 4, 100 + i % 3));
    meshes[0]->post(*owned.back());
    all.push_back(owned.back().get());
  }
  for (int round = 0; round < 200; ++round) {
    for (auto& m : meshes) m->progress(std::chrono::microseconds(0));
  }
  for (int i = 0; i < kMessages; ++i) {
    owned.push_back(request(Request::Kind::kRecv, 0, &in[i], 4, 100 + i % 3));
    meshes[1]->post(*owned.back());
    all.push_back(owned.back().get());
  }
  ASSERT_TRUE(driveAll(meshes, all));
  for (Done* d : all) EXPECT_EQ(d->error, "");
  EXPECT_EQ(in, out);
}

TEST(Ibverbs, BothDirectionsAtOnceWithManyMessagesInFlight) {
  auto meshes = connectAll(2);
  constexpr int kMessages = 200;
  std::vector<std::vector<std::uint8_t>> out(2 * kMessages), in(2 * kMessages);
  std::vector<std::unique_ptr<Done>> owned;
  std::vector<Done*> all;
  for (int i = 0; i < 2 * kMessages; ++i) {
    const std::uint64_t bytes = (i % 4 == 0) ? 20000 + i : 100 + i;  // announced and eager
    out[i].assign(bytes, static_cast<std::uint8_t>(i));
    in[i].assign(bytes, 0);
  }
  for (int i = 0; i < kMessages; ++i) {
    for (int r = 0; r < 2; ++r) {
      const int m = r * kMessages + i;
      owned.push_back(request(Request::Kind::kSend, 1 - r, out[m].data(), out[m].size(), i));
      meshes[r]->post(*owned.back());
      all.push_back(owned.back().get());
      const int from = (1 - r) * kMessages + i;
      owned.push_back(request(Request::Kind::kRecv, 1 - r, in[from].data(), in[from].size(), i));
      meshes[r]->post(*owned.back());
      all.push_back(owned.back().get());
    }
  }
  ASSERT_TRUE(driveAll(meshes, all));
  for (Done* d : all) EXPECT_EQ(d->error, "");
  EXPECT_EQ(in, out);
}

TEST(Ibverbs, ForcedWithoutADeviceIsUnsupportedAndSaysWhy) {
  MeshOptions o = optionsFor(0, 2);
  o.ib.library = "/nonexistent/libibverbs.so.1";
  try {
    Mesh mesh(o);
    FAIL() << "a mesh without verbs was made";
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/libibverbs.so.1"), std::string::npos)
        << e.what();
  }
}

TEST(Ibverbs, AutoWithoutADeviceFallsBackToTcp) {
  auto meshes = connectAll(2, [](MeshOptions& o) {
    o.transport = "auto";
    o.ib.library = "/nonexistent/libibverbs.so.1";
    o.shm.hostId = "host" + std::to_string(o.rank);  // two hosts: no shared memory
  });
  EXPECT_EQ(meshes[0]->transportNames()[1], "tcp");
  exchangeRing(meshes, 100000, true);
}

TEST(Ibverbs, AutoPicksIbverbsBetweenHostsAndSharedMemoryWithin) {
  // Ranks 0, 1 on one host, 2 on another.
  auto meshes = connectAll(3, [](MeshOptions& o) {
    o.transport = "auto";
    o.shm.hostId = o.rank < 2 ? "hostA" : "hostB";
  });
  EXPECT_EQ(meshes[0]->transportNames()[1], "shm");
  EXPECT_EQ(meshes[0]->transportNames()[2], "ibverbs");
  EXPECT_EQ(meshes[2]->transportNames()[1], "ibverbs");
  exchangeRing(meshes, 300000, false);
}

TEST(Ibverbs, AMismatchNamesBothSides) {
  auto meshes = connectAll(2);
  std::vector<std::uint8_t> out(64), in(128);
  auto send = request(Request::Kind::kSend, 1, out.data(), out.size());
  auto recv = request(Request::Kind::kRecv, 0, in.data(), in.size());
  meshes[0]->post(*send);
  meshes[1]->post(*recv);
  std::string error;
  auto deadline = Clock::now() + 10s;
  while (Clock::now() < deadline && !recv->finished) {
    try {
      for (auto& m : meshes) m->progress(std::chrono::microseconds(0));
    } catch (const MismatchError& e) {
      error = e.what();
      break;
    }
  }
  EXPECT_TRUE(recv->finished || !error.empty());
  const std::string seen = error.empty() ? recv->error : error;
  EXPECT_NE(seen.find("64 bytes"), std::string::npos) << seen;
  EXPECT_NE(seen.find("128 bytes"), std::string::npos) << seen;
}

// Each HELLO proves the job's secret, bound to both ranks and both queue pairs: ranks with
// the same secret talk, ranks with different ones stop with an error that says so.
TEST(Ibverbs, HellosProveTheJobsSecret) {
  auto secretOf = [](int rank, bool same) {
    return secure::JobSecret::fromText(
        rank == 0 || same ? "the job's own secret" : "another secret entirely", "the test's");
  };
  auto meshes = connectAll(2, [&](MeshOptions& o) { o.secret = secretOf(o.rank, true); });
  exchangeRing(meshes, 100000, false);
  meshes.clear();

  MeshOptions o0 = optionsFor(0, 2), o1 = optionsFor(1, 2);
  o0.secret = secretOf(0, false);
  o1.secret = secretOf(1, false);
  Mesh m0(o0), m1(o1);
  const std::vector<std::string> addresses = {m0.address(), m1.address()};
  std::string e0, e1;
  std::thread other([&] {
    try {
      m1.connect(addresses, Clock::now() + 3s);
    } catch (const Error& e) {
      e1 = e.what();
    }
  });
  try {
    m0.connect(addresses, Clock::now() + 3s);
  } catch (const Error& e) {
    e0 = e.what();
  }
  other.join();
  EXPECT_NE((e0 + e1).find("does not prove the job's secret"), std::string::npos) << e0 << "\n"
                                                                                  << e1;
}

TEST(Ibverbs, APeerThatFailsTellsWhy) {
  auto meshes = connectAll(2);
  std::vector<std::uint8_t> in(100000);
  auto recv = request(Request::Kind::kRecv, 0, in.data(), in.size());
  meshes[1]->post(*recv);
  meshes[0]->fail(IoError(Where{0, "allreduce", -1}, "rank 0 ran out of luck"));
  ASSERT_TRUE(driveAll(meshes, {recv.get()}, 10s));
  EXPECT_NE(recv->error.find("ran out of luck"), std::string::npos) << recv->error;
}

TEST(Ibverbs, APeerThatClosesWithAMessageInFlightIsAnError) {
  auto meshes = connectAll(2);
  std::vector<std::uint8_t> in(100);
  auto recv = request(Request::Kind::kRecv, 0, in.data(), in.size());
  meshes[1]->post(*recv);
  meshes[0].reset();  // GOODBYE, then its queue pair goes
  ASSERT_TRUE(driveAll(meshes, {recv.get()}, 5s));
  EXPECT_NE(recv->error.find("rank 0 closed its context"), std::string::npos) << recv->error;
}

TEST(Ibverbs, AClosedPeerWithNothingInFlightIsNoFailure) {
  auto meshes = connectAll(2);
  exchangeRing(meshes, 1000, true);
  meshes[0].reset();  // GOODBYE, then its queue pair goes
  for (int i = 0; i < 2000; ++i) meshes[1]->progress(std::chrono::microseconds(100));
  EXPECT_EQ(meshes[1]->failure(), nullptr);
  // A later receive from it fails at once, naming it.
  std::vector<std::uint8_t> in(10);
  auto recv = request(Request::Kind::kRecv, 0, in.data(), in.size());
  try {
    meshes[1]->post(*recv);
    for (int i = 0; i < 100 && !recv->finished; ++i) meshes[1]->progress(1ms);
    EXPECT_TRUE(recv->finished);
    EXPECT_NE(recv->error.find("rank 0"), std::string::npos) << recv->error;
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0"), std::string::npos) << e.what();
  }
}

TEST(Ibverbs, AWaitingRankSleepsAndIsWokenByItsPeer) {
  auto meshes = connectAll(2);
  std::uint64_t value = 0, sent = 0xfeedface;
  auto recv = request(Request::Kind::kRecv, 0, &value, sizeof(value));
  meshes[1]->post(*recv);
  std::thread sleeper([&] {
    auto deadline = Clock::now() + 10s;
    while (!recv->finished && Clock::now() < deadline) meshes[1]->progress(200ms);
  });
  std::this_thread::sleep_for(50ms);
  auto send = request(Request::Kind::kSend, 1, &sent, sizeof(sent));
  const auto start = Clock::now();
  meshes[0]->post(*send);
  while (!send->finished) meshes[0]->progress(1ms);
  sleeper.join();
  EXPECT_TRUE(recv->finished);
  EXPECT_EQ(value, sent);
  // Woken by the completion channel, not by the end of its 200 ms wait.
  EXPECT_LT(Clock::now() - start, 150ms);
}

// ---- the registration cache (ibverbs/registrations.h) --------------------------------------

namespace cache {

using ibverbs::MemoryMonitor;
using ibverbs::Registrations;

const std::size_t kPage = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));

Registrations::Counters operator-(const Registrations::Counters& a,
                                  const Registrations::Counters& b) {
  return {a.registrations - b.registrations, a.hits - b.hits, a.invalidations - b.invalidations,
          a.evictions - b.evictions, a.uncached - b.uncached};
}

std::string describe(const Registrations::Counters& c) {
  return std::to_string(c.registrations) + " registrations, " + std::to_string(c.hits) + " hits, " +
         std::to_string(c.invalidations) + " invalidations, " + std::to_string(c.evictions) +
         " evictions, " + std::to_string(c.uncached) + " uncached";
}

// The counters' change over `body`, in every cache of the process.
Registrations::Counters during(const std::function<void()>& body) {
  const auto before = Registrations::totals();
  body();
  return Registrations::totals() - before;
}

// Anonymous memory inside a reservation of our own (PROT_NONE), so that a buffer can be
// freed and mapped again at its address, larger too, without touching anyone else's memory.
class Arena {
 public:
  explicit Arena(std::size_t bytes) : bytes_(bytes) {
    base_ = static_cast<std::uint8_t*>(
        mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
    if (base_ == MAP_FAILED) throw std::runtime_error("mmap of the arena failed");
  }
  ~Arena() { munmap(base_, bytes_); }
  // Maps [offset, offset + bytes) afresh (MAP_FIXED over our own reservation or buffer: the
  // old pages, if any, are unmapped in the same call) and fills it with `seed`'s pattern.
  std::uint8_t* map(std::size_t offset, std::size_t bytes, unsigned seed) {
    void* at = mmap(base_ + offset, bytes, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (at != base_ + offset) throw std::runtime_error("mmap MAP_FIXED in the arena failed");
    fill(base_ + offset, bytes, seed);
    return base_ + offset;
  }
  // munmap, then mmap at the same address with MAP_FIXED_NOREPLACE: free, then allocate.
  std::uint8_t* freeAndMap(std::size_t offset, std::size_t oldBytes, std::size_t bytes,
                           unsigned seed) {
    if (munmap(base_ + offset, oldBytes) != 0) throw std::runtime_error("munmap failed");
    void* at = mmap(base_ + offset, bytes, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (at != base_ + offset) {
      throw std::runtime_error("the freed address was taken before it could be mapped again");
    }
    fill(base_ + offset, bytes, seed);
    return base_ + offset;
  }
  static void fill(std::uint8_t* p, std::size_t n, unsigned seed) {
    for (std::size_t i = 0; i < n; ++i)
      p[i] = static_cast<std::uint8_t>(i * 7 + seed * 13 + (i >> 12));
  }
  static bool filled(const std::uint8_t* p, std::size_t n, unsigned seed) {
    for (std::size_t i = 0; i < n; ++i) {
      if (p[i] != static_cast<std::uint8_t>(i * 7 + seed * 13 + (i >> 12))) return false;
    }
    return true;
  }

 private:
  std::uint8_t* base_;
  std::size_t bytes_;
};

// Rank 0 sends `bytes` from `out` to rank 1's `in`: both arrive whole, without an error (a
// stale registration would be an error completion from the verbs device).
void sendRecv(std::vector<std::unique_ptr<Mesh>>& meshes, const std::uint8_t* out, std::uint8_t* in,
              std::size_t bytes, std::uint32_t step) {
  std::memset(in, 0, bytes);
  auto send = request(Request::Kind::kSend, 1, const_cast<std::uint8_t*>(out), bytes, step);
  auto recv = request(Request::Kind::kRecv, 0, in, bytes, step);
  meshes[1]->post(*recv);
  meshes[0]->post(*send);
  ASSERT_TRUE(driveAll(meshes, {send.get(), recv.get()})) << bytes << " bytes";
  EXPECT_EQ(send->error, "");
  EXPECT_EQ(recv->error, "");
  EXPECT_EQ(std::memcmp(in, out, bytes), 0) << bytes << " bytes";
}

// Whether the verbs device can tell a stale registration (it needs the physical frames that
// /proc/self/pagemap shows to root: tests/verbs_emu/README.md).
bool deviceSeesStaleRegistrations() {
  const int fd = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  static volatile std::uint64_t touched = 1;
  const auto page = reinterpret_cast<std::uintptr_t>(&touched) / kPage;
  std::uint64_t entry = 0;
  const bool read = pread(fd, &entry, sizeof entry, static_cast<off_t>(page * 8)) == 8;
  ::close(fd);
  return read && (entry >> 63) && (entry & ((std::uint64_t{1} << 55) - 1)) != 0;
}

constexpr std::size_t kBuffer = 256 * 1024;  // announced: above the tests' eager limit

TEST(IbverbsRegistrationCache, ALargeBufferSentTwiceIsRegisteredOnce) {
  auto meshes = connectAll(2);
  Arena arena(2 * kBuffer);
  std::uint8_t* out = arena.map(0, kBuffer, 1);
  std::uint8_t* in = arena.map(kBuffer, kBuffer, 0);
  auto first = during([&] { sendRecv(meshes, out, in, kBuffer, 1); });
  EXPECT_EQ(first.registrations, 2u) << describe(first);  // the send's and the receive's
  EXPECT_EQ(first.hits, 0u) << describe(first);
  auto second = during([&] { sendRecv(meshes, out, in, kBuffer, 2); });
  EXPECT_EQ(second.registrations, 0u) << describe(second);
  EXPECT_EQ(second.hits, 2u) << describe(second);
  // A part of a cached range is a hit too.
  auto part = during([&] { sendRecv(meshes, out + 3 * kPage + 5, in + 1000, kBuffer / 2, 3); });
  EXPECT_EQ(part.registrations, 0u) << describe(part);
  EXPECT_EQ(part.hits, 2u) << describe(part);
}

TEST(IbverbsRegistrationCache, ABufferFreedAndMappedAgainNeverUsesAStaleRegistration) {
  if (!deviceSeesStaleRegistrations()) {
    GTEST_SKIP() << "/proc/self/pagemap shows no physical frames here (not root): the verbs "
                    "device cannot tell a stale registration, so this test would prove nothing";
  }
  auto meshes = connectAll(2);
  Arena arena(8 * kBuffer);
  const std::size_t inAt = 4 * kBuffer;
  std::uint8_t* out = arena.map(0, kBuffer, 1);
  std::uint8_t* in = arena.map(inAt, kBuffer, 0);
  sendRecv(meshes, out, in, kBuffer, 1);  // both cached now
  std::uint32_t step = 2;
  struct Case {
    const char* what;
    std::size_t bytes;
    bool replace;  // MAP_FIXED over the buffer, else munmap and MAP_FIXED_NOREPLACE
  };
  std::size_t bytes = kBuffer;
  for (const Case& c : {Case{"freed, mapped again, other contents", kBuffer, false},
                        Case{"mapped over, larger", 2 * kBuffer, true},
                        Case{"freed, mapped again, smaller", kBuffer / 2, false},
                        Case{"freed, mapped again, unaligned size", kBuffer / 2 + 100, false}}) {
    SCOPED_TRACE(c.what);
    const unsigned seed = step * 3;
    const std::size_t mapped = (c.bytes + kPage - 1) / kPage * kPage;
    auto changed = during([&] {
      out = c.replace ? arena.map(0, mapped, seed) : arena.freeAndMap(0, bytes, mapped, seed);
      in = c.replace ? arena.map(inAt, mapped, 0) : arena.freeAndMap(inAt, bytes, mapped, 0);
    });
    bytes = mapped;
    EXPECT_EQ(changed.invalidations, 2u) << describe(changed);  // before munmap/mmap returned
    auto again = during([&] { sendRecv(meshes, out, in, c.bytes, step++); });
    EXPECT_TRUE(Arena::filled(in, c.bytes, seed));
    EXPECT_EQ(again.registrations, 2u) << describe(again);  // new registrations, no stale hit
    EXPECT_EQ(again.hits, 0u) << describe(again);
    // And cached again.
    auto hit = during([&] { sendRecv(meshes, out, in, c.bytes, step++); });
    EXPECT_EQ(hit.hits, 2u) << describe(hit);
  }
}

TEST(IbverbsRegistrationCache, DroppedPagesInvalidate) {
  auto meshes = connectAll(2);
  Arena arena(2 * kBuffer);
  std::uint8_t* out = arena.map(0, kBuffer, 1);
  std::uint8_t* in = arena.map(kBuffer, kBuffer, 0);
  sendRecv(meshes, out, in, kBuffer, 1);
  for (int advice : {MADV_DONTNEED, MADV_FREE}) {
    auto dropped = during([&] {
      ASSERT_EQ(madvise(out + kPage, kPage, advice), 0);  // one page of the send buffer
      ASSERT_EQ(madvise(in, kBuffer, advice), 0);
    });
    EXPECT_EQ(dropped.invalidations, 2u) << describe(dropped);
    Arena::fill(out, kBuffer, 5);
    auto again = during([&] { sendRecv(meshes, out, in, kBuffer, advice == MADV_FREE ? 3 : 2); });
    EXPECT_EQ(again.registrations, 2u) << describe(again);
    EXPECT_EQ(again.hits, 0u) << describe(again);
  }
}

TEST(IbverbsRegistrationCache, TheBoundEvictsTheLeastRecentlyUsed) {
  constexpr std::size_t kSmall = 64 * 1024;
  auto meshes = connectAll(2, [](MeshOptions& o) { o.ib.mrCacheBytes = 3 * kSmall; });
  Arena arena(6 * kSmall);
  std::vector<std::uint8_t*> outs;
  for (unsigned i = 0; i < 5; ++i) outs.push_back(arena.map(i * kSmall, kSmall, i));
  std::uint8_t* in = arena.map(5 * kSmall, kSmall, 0);
  std::uint32_t step = 1;
  // The receive buffer and three send buffers fit on each side: rank 0 holds 5 x 64 KiB
  // of send buffers in a cache of 3.
  auto five = during([&] {
    for (std::uint8_t* out : outs) sendRecv(meshes, out, in, kSmall, step++);
  });
  EXPECT_EQ(five.registrations, 6u) << describe(five);  // 5 sends, 1 receive
  EXPECT_EQ(five.hits, 4u) << describe(five);           // the receive buffer
  EXPECT_EQ(five.evictions, 2u) << describe(five);      // the 1st and 2nd send buffers
  auto recent = during([&] { sendRecv(meshes, outs[4], in, kSmall, step++); });
  EXPECT_EQ(recent.registrations, 0u) << describe(recent);
  auto oldest = during([&] { sendRecv(meshes, outs[0], in, kSmall, step++); });
  EXPECT_EQ(oldest.registrations, 1u) << describe(oldest);
  EXPECT_EQ(oldest.evictions, 1u) << describe(oldest);
  // Larger than the whole bound: registered for the message only.
  Arena big(4 * kSmall);
  std::uint8_t* large = big.map(0, 4 * kSmall, 9);
  std::vector<std::uint8_t> sink(4 * kSmall);
  auto alone = during([&] { sendRecv(meshes, large, sink.data(), 4 * kSmall, step++); });
  EXPECT_EQ(alone.uncached, 2u) << describe(alone);
}

TEST(IbverbsRegistrationCache, ZeroRegistersForEachMessage) {
  auto meshes = connectAll(2, [](MeshOptions& o) { o.ib.mrCacheBytes = 0; });
  Arena arena(2 * kBuffer);
  std::uint8_t* out = arena.map(0, kBuffer, 1);
  std::uint8_t* in = arena.map(kBuffer, kBuffer, 0);
  auto twice = during([&] {
    sendRecv(meshes, out, in, kBuffer, 1);
    sendRecv(meshes, out, in, kBuffer, 2);
  });
  EXPECT_EQ(twice.registrations, 4u) << describe(twice);
  EXPECT_EQ(twice.uncached, 4u) << describe(twice);
  EXPECT_EQ(twice.hits, 0u) << describe(twice);
  EXPECT_FALSE(MemoryMonitor::running());  // no cache, no monitor
}

// The monitor's thread (by its name) and userfaultfd (by its link) in this process.
int monitorThreads() {
  int n = 0;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    std::getline(comm, name);
    n += name == "collx-mr-watch";
  }
  return n;
}
int userfaultfds() {
  int n = 0;
  for (const auto& fd : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code error;
    n += std::filesystem::read_symlink(fd.path(), error).string() == "anon_inode:[userfaultfd]";
  }
  return n;
}

TEST(IbverbsRegistrationCache, TheMonitorGoesWithTheLastDevice) {
  ASSERT_FALSE(MemoryMonitor::running());
  ASSERT_EQ(monitorThreads(), 0);
  ASSERT_EQ(userfaultfds(), 0);
  for (int round = 0; round < 2; ++round) {
    auto meshes = connectAll(3);
    EXPECT_TRUE(MemoryMonitor::running());
    EXPECT_EQ(monitorThreads(), 1);  // one for the process, not one per device
    EXPECT_EQ(userfaultfds(), 1);
    Arena arena(2 * kBuffer);
    sendRecv(meshes, arena.map(0, kBuffer, 1), arena.map(kBuffer, kBuffer, 0), kBuffer, 1);
    meshes.pop_back();
    EXPECT_TRUE(MemoryMonitor::running());
    meshes.clear();
    EXPECT_FALSE(MemoryMonitor::running());
    EXPECT_EQ(monitorThreads(), 0);
    EXPECT_EQ(userfaultfds(), 0);
  }
}

// A protection domain of the verbs device, for Registrations alone.
struct Domain {
  Domain() {
    std::string why;
    library = ibverbs::VerbsLibrary::load(COLLX_VERBS_EMU_PATH, &why);
    if (library == nullptr) throw std::runtime_error(why);
    ibverbs::DeviceList list(library);
    if (!list.ok() || list.size() != 1) throw std::runtime_error("no emu0");
    const auto& api = library->api();
    context = ibverbs::Context(library, api.openDevice(list[0]), api.closeDevice, "context");
    pd = ibverbs::ProtectionDomain(library, api.allocPd(context.get()), api.deallocPd, "PD");
    if (!pd) throw std::runtime_error("ibv_alloc_pd failed");
  }
  std::shared_ptr<const ibverbs::VerbsLibrary> library;
  ibverbs::Context context;
  ibverbs::ProtectionDomain pd;
};

TEST(IbverbsRegistrationCache, AnEntryInUseIsNeverHandedOutAgainOnceItsMemoryChanged) {
  Domain domain;
  std::string why;
  {
    Registrations cache(domain.library, domain.pd.get(), std::uint64_t{1} << 30);
    ASSERT_TRUE(cache.caching());
    Arena arena(2 * kBuffer);
    std::uint8_t* buffer = arena.map(0, kBuffer, 1);
    auto used = cache.acquire(buffer, kBuffer, &why);
    ASSERT_TRUE(used) << why;
    EXPECT_EQ(cache.cachedBytes(), kBuffer);
    buffer = arena.map(0, kBuffer, 2);  // mapped over while a message uses it
    EXPECT_EQ(cache.counters().invalidations, 1u);
    EXPECT_EQ(cache.cachedBytes(), 0u);
    auto fresh = cache.acquire(buffer + 10, 100, &why);
    ASSERT_TRUE(fresh) << why;
    EXPECT_NE(fresh.mr, used.mr);
    EXPECT_EQ(cache.counters().hits, 0u);
    cache.release(used);  // deregistered now
    cache.release(fresh);
    auto again = cache.acquire(buffer, 100, &why);  // the fresh entry, cached
    EXPECT_EQ(cache.counters().hits, 1u);
    cache.release(again);
    EXPECT_EQ(cache.counters().registrations, 2u) << describe(cache.counters());
  }
  EXPECT_EQ(domain.pd.destroy(), 0);  // every region deregistered
}

// A cache of 1 GiB over the device's protection domain (destroyed before it).
struct CacheOnDevice {
  Domain domain;
  Registrations cache{domain.library, domain.pd.get(), std::uint64_t{1} << 30};

  // Maps kBuffer bytes at the arena's start and caches their registration.
  std::uint8_t* mapCached(Arena& arena) {
    std::uint8_t* buffer = arena.map(0, kBuffer, 1);
    std::string why;
    auto handle = cache.acquire(buffer, kBuffer, &why);
    if (!handle) throw std::runtime_error(why);
    cache.release(handle);
    return buffer;
  }
};

TEST(IbverbsRegistrationCache, MovedMemoryInvalidates) {
  CacheOnDevice device;
  Registrations& cache = device.cache;
  Arena arena(4 * kBuffer);
  std::uint8_t* buffer = device.mapCached(arena);
  void* moved =
      mremap(buffer, kBuffer, kBuffer, MREMAP_MAYMOVE | MREMAP_FIXED, buffer + 2 * kBuffer);
  ASSERT_EQ(moved, buffer + 2 * kBuffer);
  EXPECT_EQ(cache.counters().invalidations, 1u);
  EXPECT_TRUE(Arena::filled(buffer + 2 * kBuffer, kBuffer, 1));
  // Touching the moved memory, and memory mapped again where it was, never waits.
  Arena::fill(buffer + 2 * kBuffer, kBuffer, 3);
  buffer = arena.map(0, kBuffer, 4);
  std::string why;
  auto handle = cache.acquire(buffer, kBuffer, &why);
  ASSERT_TRUE(handle) << why;
  EXPECT_EQ(cache.counters().hits, 0u);
  cache.release(handle);
}

TEST(IbverbsRegistrationCache, PagesAddedToAWatchedMappingAreServedWithoutWaiting) {
  // A cached buffer's mapping grown in place (mremap without MAYMOVE): the new pages belong
  // to the watched mapping but were never populated; the first touch of one is a page fault
  // that the monitor resolves. The cached range itself stays valid.
  CacheOnDevice device;
  Registrations& cache = device.cache;
  Arena arena(4 * kBuffer);
  std::uint8_t* buffer = device.mapCached(arena);
  ASSERT_EQ(munmap(buffer + kBuffer, kBuffer), 0);  // room after it
  ASSERT_EQ(mremap(buffer, kBuffer, 2 * kBuffer, 0), buffer);
  std::atomic<bool> touched{false};
  std::thread toucher([&] {
    for (std::size_t i = kBuffer; i < 2 * kBuffer; i += kPage) buffer[i] = 7;
    touched = true;
  });
  const auto deadline = Clock::now() + 10s;
  while (!touched && Clock::now() < deadline) std::this_thread::sleep_for(1ms);
  if (!touched) {
    toucher.detach();  // blocked in a page fault: nothing can be asserted after this
    FAIL() << "a thread touching new pages of a watched mapping still waits";
  }
  toucher.join();
  EXPECT_EQ(buffer[kBuffer + kPage], 7);
  std::string why;
  auto handle = cache.acquire(buffer, kBuffer, &why);
  ASSERT_TRUE(handle) << why;
  EXPECT_EQ(cache.counters().hits, 1u) << describe(cache.counters());
  cache.release(handle);
}

TEST(IbverbsRegistrationCache, MemoryThatCannotBeWatchedIsRegisteredPerUse) {
  // A private mapping of a file: userfaultfd watches anonymous memory, shmem and hugetlbfs.
  const int fd = ::open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  void* file = mmap(nullptr, 16 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  ::close(fd);
  ASSERT_NE(file, MAP_FAILED);
  {
    CacheOnDevice device;
    Registrations& cache = device.cache;
    std::string why;
    for (int i = 0; i < 2; ++i) {
      auto handle = cache.acquire(file, 16 * kPage, &why);
      ASSERT_TRUE(handle) << why;
      cache.release(handle);
    }
    EXPECT_EQ(cache.counters().uncached, 2u) << describe(cache.counters());
    EXPECT_EQ(cache.counters().hits, 0u) << describe(cache.counters());
  }
  munmap(file, 16 * kPage);
}

TEST(IbverbsRegistrationCache, WithoutUserfaultfdNothingIsCached) {
  // A child whose seccomp filter refuses userfaultfd (ENOSYS), as a container's may.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_userfaultfd, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    sock_fprog program{static_cast<unsigned short>(std::size(filter)), filter};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) != 0) {
      _exit(10);
    }
    int code = 0;
    try {
      Domain domain;
      Registrations cache(domain.library, domain.pd.get(), std::uint64_t{1} << 30);
      if (cache.caching() || MemoryMonitor::running()) code = 11;
      std::vector<std::uint8_t> bytes(kBuffer);
      std::string why;
      for (int i = 0; i < 2 && code == 0; ++i) {
        auto handle = cache.acquire(bytes.data(), bytes.size(), &why);
        if (!handle) code = 12;
        cache.release(handle);
      }
      if (code == 0 && cache.counters().uncached != 2) code = 13;
    } catch (const std::exception&) {
      code = 14;
    }
    _exit(code);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: no seccomp filter, 11: cached anyway, 12: not "
                                       "registered, 13: not counted per use, 14: an exception";
}

}  // namespace cache

// Every verbs object of every test was destroyed, in order, on every path (the device refuses
// destroys out of order: a PD with MRs or QPs, a CQ with QPs or unacknowledged events, ...).
class NothingLeaked : public ::testing::Environment {
 public:
  void TearDown() override { EXPECT_EQ(ibverbs::destroyFailures(), 0u); }
};
const auto* const kNothingLeaked = ::testing::AddGlobalTestEnvironment(new NothingLeaked);

}  // namespace
}  // namespace collx::transport
