// collx-handoff-probe: how fast two cores hand data to each other right now. Two threads of
// one process, pinned to two CPUs, no collx code: one writes a buffer in pieces and raises a
// counter after each, the other copies each piece out as soon as it is raised (the way the
// shared-memory collectives move data through the arena); and a cache line's round trip.
// On a VM the host may move the vCPUs, and both figures then change by 2-5x within seconds:
// printed per sample, so that a benchmark round can be read against the state it met.
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

void usage(std::FILE* to) {
  std::fprintf(to,
               "usage: collx-handoff-probe [SAMPLES [PIECE_KIB [BUFFER_KIB [CPU_A CPU_B]]]]\n\n"
               "Per sample (0.2 s apart): the GB/s at which one thread copies pieces of\n"
               "PIECE_KIB (default 64) out of a BUFFER_KIB (default 4096) buffer as another\n"
               "writes them, and a cache line's round trip between the two (ns). Defaults:\n"
               "5 samples, CPUs 0 and 1. Ends with the median of each.\n");
}

bool pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}

struct alignas(64) Line {
  std::atomic<std::int64_t> value{0};
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "-h") == 0 || std::strcmp(argv[i], "--help") == 0) {
      usage(stdout);
      return 0;
    }
  }
  auto arg = [&](int i, long fallback) {
    if (argc <= i) return fallback;
    char* end = nullptr;
    long v = std::strtol(argv[i], &end, 10);
    if (end == argv[i] || *end != '\0' || v < 0) {
      std::fprintf(stderr, "collx-handoff-probe: '%s' is not a number\n", argv[i]);
      usage(stderr);
      std::exit(2);
    }
    return v;
  };
  const long samples = arg(1, 5);
  const std::size_t piece = static_cast<std::size_t>(arg(2, 64)) * 1024;
  const std::size_t bytes = static_cast<std::size_t>(arg(3, 4096)) * 1024;
  const int cpuA = static_cast<int>(arg(4, 0)), cpuB = static_cast<int>(arg(5, 1));
  if (piece == 0 || bytes < piece || bytes % piece != 0) {
    std::fprintf(stderr, "collx-handoff-probe: the buffer must be a whole number of pieces\n");
    return 2;
  }
  const std::size_t pieces = bytes / piece;
  constexpr int kTrips = 20000;
  std::vector<char> src(bytes, 1), shared(bytes, 2), dst(bytes, 3);
  Line ping, pong, produced, go;
  std::atomic<bool> pinnedB{true};

  if (!pin(cpuA)) {
    std::fprintf(stderr, "collx-handoff-probe: cannot run on CPU %d\n", cpuA);
    return 1;
  }
  // B: answers kTrips pings, then copies out `pieces` pieces; once per sample (go = sample).
  std::thread b([&] {
    pinnedB = pin(cpuB);
    for (std::int64_t s = 1; s <= samples; ++s) {
      while (go.value.load(std::memory_order_acquire) < s) std::this_thread::yield();
      const std::int64_t base = (s - 1) * kTrips;
      for (std::int64_t i = 1; i <= kTrips; ++i) {
        while (ping.value.load(std::memory_order_acquire) != base + i) {
        }
        pong.value.store(base + i, std::memory_order_release);
      }
      const std::int64_t first = (s - 1) * static_cast<std::int64_t>(pieces);
      for (std::size_t p = 0; p < pieces; ++p) {
        while (produced.value.load(std::memory_order_acquire) <=
               first + static_cast<std::int64_t>(p)) {
        }
        std::memcpy(dst.data() + p * piece, shared.data() + p * piece, piece);
      }
      pong.value.store(-s, std::memory_order_release);  // this sample's copies are done
    }
  });
  std::vector<double> rates, trips;
  std::printf("# collx-handoff-probe: %zu KiB pieces of %zu KiB, CPUs %d and %d\n", piece / 1024,
              bytes / 1024, cpuA, cpuB);
  for (std::int64_t s = 1; s <= samples; ++s) {
    go.value.store(s, std::memory_order_release);
    const std::int64_t base = (s - 1) * kTrips;
    const auto t0 = Clock::now();
    for (std::int64_t i = 1; i <= kTrips; ++i) {
      ping.value.store(base + i, std::memory_order_release);
      while (pong.value.load(std::memory_order_acquire) != base + i) {
      }
    }
    const auto t1 = Clock::now();
    const std::int64_t first = (s - 1) * static_cast<std::int64_t>(pieces);
    for (std::size_t p = 0; p < pieces; ++p) {
      std::memcpy(shared.data() + p * piece, src.data() + p * piece, piece);
      produced.value.store(first + static_cast<std::int64_t>(p) + 1, std::memory_order_release);
    }
    while (pong.value.load(std::memory_order_acquire) != -s) {
    }
    const auto t2 = Clock::now();
    const double trip = std::chrono::duration<double, std::nano>(t1 - t0).count() / kTrips;
    const double rate =
        static_cast<double>(bytes) / std::chrono::duration<double>(t2 - t1).count() / 1e9;
    trips.push_back(trip);
    rates.push_back(rate);
    std::printf("handoff %6.1f GB/s  round trip %7.0f ns\n", rate, trip);
    std::fflush(stdout);
    if (s < samples) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  b.join();
  if (!pinnedB) std::fprintf(stderr, "collx-handoff-probe: could not pin to CPU %d\n", cpuB);
  std::printf("median: handoff %.1f GB/s, round trip %.0f ns\n", median(rates), median(trips));
  return 0;
}
