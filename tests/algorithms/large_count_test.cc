// 64-bit counts end to end: more than 2^31 elements through allreduce, allgatherv and
// alltoallv (int8 keeps it within memory), every element checked, and one message over
// 4 GiB, between threads and between processes (over shared memory: single copy and ring
// copy). Needs ~10 GiB of memory; labelled "large" (not run under the sanitizers).
#include <gtest/gtest.h>

#include <cstring>

#include "collx/collx.h"
#include "util/test_util.h"
#include "util/world.h"

namespace collx {
namespace {

using test::World;

constexpr std::uint64_t kOverInt = (std::uint64_t{1} << 31) + 12345;  // > 2^31 elements

// Rank r's bytes are test::patternBytes' pattern r (made and checked at memory speed).
void fill(void* data, std::uint64_t n, std::uint64_t seed) { test::patternBytes(seed, 0, data, n); }

TEST(LargeCounts, AllreduceOverTwoToTheThirtyOneElements) {
  World world(2);
  std::vector<std::string> wrong(2);
  world.runOk([&](int rank, Context& ctx) {
    test::LargeBuffer v(kOverInt);
    fill(v.data(), kOverInt, rank);
    allreduce(ctx, v.data(), v.data(), kOverInt, DataType::kInt8);
    std::vector<std::uint8_t> other(64 * 1024);
    std::int64_t bad = test::firstMismatch(
        v.data(), kOverInt, [&](std::uint64_t first, std::uint8_t* out, std::size_t len) {
          test::patternBytes(0, first, out, len);
          test::patternBytes(1, first, other.data(), len);
          for (std::size_t i = 0; i < len; ++i)
            out[i] = static_cast<std::uint8_t>(out[i] + other[i]);
        });
    if (bad >= 0) wrong[rank] = "element " + std::to_string(bad);
  });
  EXPECT_EQ(wrong[0], "");
  EXPECT_EQ(wrong[1], "");
}

TEST(LargeCounts, AllgathervOverTwoToTheThirtyOneElements) {
  World world(2);
  // Rank 0 contributes more than 2^31 elements by itself; rank 1 a few.
  const Counts counts = {kOverInt, 1000};
  const Counts displs = {0, kOverInt + 7};
  const std::uint64_t extent = displs[1] + counts[1];
  std::vector<std::string> wrong(2);
  world.runOk([&](int rank, Context& ctx) {
    test::LargeBuffer all(extent);
    std::memset(all.data(), -1, extent);
    {
      test::LargeBuffer mine(counts[rank]);
      fill(mine.data(), mine.size(), rank);
      allgatherv(ctx, mine.data(), counts[rank], all.data(), counts, displs, DataType::kInt8);
    }
    for (int r = 0; r < 2 && wrong[rank].empty(); ++r) {
      std::int64_t bad = test::firstPatternMismatch(all.data() + displs[r], counts[r], r);
      if (bad >= 0) wrong[rank] = "block " + std::to_string(r) + " element " + std::to_string(bad);
    }
    if (all.data()[kOverInt] != -1) wrong[rank] = "the gap between the blocks was written";
  });
  EXPECT_EQ(wrong[0], "");
  EXPECT_EQ(wrong[1], "");
}

TEST(LargeCounts, AlltoallvOverTwoToTheThirtyOneElements) {
  World world(2);
  // Each rank receives more than 2^31 elements in all: 2^30 + x from itself and from the other.
  const std::uint64_t half = (std::uint64_t{1} << 30) + 4321;
  std::vector<std::string> wrong(2);
  world.runOk([&](int rank, Context& ctx) {
    Counts sc = {half, half}, sd = {0, half}, rc = {half, half}, rd = {0, half};
    test::LargeBuffer out(2 * half);
    std::memset(out.data(), -1, out.size());
    {
      test::LargeBuffer in(2 * half);
      fill(in.data(), in.size(), rank);
      alltoallv(ctx, in.data(), sc, sd, out.data(), rc, rd, DataType::kInt8);
    }
    for (int from = 0; from < 2 && wrong[rank].empty(); ++from) {
      // Block `rank` of rank `from`'s input: elements rank*half.. of its pattern.
      std::int64_t bad = test::firstPatternMismatch(out.data() + rd[from], half, from, rank * half);
      if (bad >= 0)
        wrong[rank] = "from rank " + std::to_string(from) + " element " + std::to_string(bad);
    }
  });
  EXPECT_EQ(wrong[0], "");
  EXPECT_EQ(wrong[1], "");
}

TEST(LargeCounts, OneMessageOverFourGibibytes) {
  World world(2);
  const std::uint64_t bytes = (std::uint64_t{9} << 29) + 3;  // 4.5 GiB + 3
  std::string wrong;
  world.runOk([&](int rank, Context& ctx) {
    test::LargeBuffer buffer(bytes);
    if (rank == 0) {
      fill(buffer.data(), bytes, 5);
      send(ctx, buffer.data(), bytes, DataType::kInt8, 1, 42);
    } else {
      recv(ctx, buffer.data(), bytes, DataType::kInt8, 0, 42);
      std::int64_t bad = test::firstPatternMismatch(buffer.data(), bytes, 5);
      if (bad >= 0) wrong = "byte " + std::to_string(bad);
    }
  });
  EXPECT_EQ(wrong, "");
}

TEST(LargeCounts, OneMessageOverFourGibibytesBetweenProcesses) {
  const std::string bytes = std::to_string((std::uint64_t{9} << 29) + 3);
  for (const char* cma : {"1", "0"}) {
    test::RunResult r = test::run({test::binDir() + "/collx-run", "-n", "2", "--",
                                   test::binDir() + "/collx-test-worker", "message", bytes},
                                  {{"COLLX_TRANSPORT", "shm"},
                                   {"COLLX_SHM_CMA", cma},
                                   {"COLLX_JOB_ID", ""},
                                   {"COLLX_STORE", ""},
                                   {"COLLX_TIMEOUT", "300s"}},
                                  std::chrono::seconds(400));
    EXPECT_EQ(r.code, 0) << "COLLX_SHM_CMA=" << cma << ": " << r.err;
  }
}

}  // namespace
}  // namespace collx
