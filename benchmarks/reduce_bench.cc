// Throughput of the reduction kernels (reduceInto: dst[i] = dst[i] (op) src[i]).
//
// bytes_per_second counts every byte read and written (reduceInto reads dst and src and
// writes dst: 3 x the buffer per call) in decimal units (1 G = 1e9): the convention of
// ../shared/peers/limits/reduce_bw.c, the plain C loop that gives this machine's limit. The
// shared host's memory bandwidth varies (the figure recorded in
// ../shared/peers/baseline/limits.txt is well below what the loop gives on other days:
// benchmarks/README.md), so compare the two from the same minute.
//
// Each case runs on every available instruction set (avx512, avx2, scalar); the label says
// which one dispatch picks, i.e. what reduceInto() runs. Filter with --benchmark_filter, e.g.
// --benchmark_filter='float32_sum/avx512'.
//
// copy/<path>: collx's copies (collx/base/copy.h: memcpy, the vector loops, copyBytes and
// copyStreaming, what the transports and algorithms copy with), bytes copied per second:
// memcpy_bw.c's "copied" figure. GCC 12 once compiled the avx2 loop 8x slower than memcpy.
#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "collx/algorithms/reduce.h"
#include "collx/base/copy.h"
#include "kernels/reduce_kernels.h"

namespace collx::algorithms {
namespace {

using detail::ReduceIsa;

// A page-aligned buffer (as reduce_bw.c's aligned_alloc(4096)), touched before timing.
class PageAlignedBuffer {
 public:
  explicit PageAlignedBuffer(std::size_t bytes) : storage_(bytes + kPage) {
    const auto address = reinterpret_cast<std::uintptr_t>(storage_.data());
    data_ = storage_.data() + (kPage - address % kPage) % kPage;
  }
  unsigned char* data() { return data_; }

 private:
  static constexpr std::size_t kPage = 4096;
  std::vector<unsigned char> storage_;
  unsigned char* data_;
};

// src[i] = i % 8 in the element type, dst = 0: the values stay ordinary (no subnormals).
void fillSmallValues(unsigned char* p, std::size_t count, DataType type, bool zero) {
  // 0..7 in float16 and bfloat16.
  static constexpr std::uint16_t kHalf[8] = {0x0000, 0x3C00, 0x4000, 0x4200,
                                             0x4400, 0x4500, 0x4600, 0x4700};
  static constexpr std::uint16_t kBfloat16[8] = {0x0000, 0x3F80, 0x4000, 0x4040,
                                                 0x4080, 0x40A0, 0x40C0, 0x40E0};
  const std::size_t size = dataTypeSize(type);
  for (std::size_t i = 0; i < count; ++i) {
    const unsigned v = zero ? 0 : static_cast<unsigned>(i % 8);
    unsigned char* at = p + i * size;
    switch (type) {
      case DataType::kFloat16:
        std::memcpy(at, &kHalf[v], 2);
        break;
      case DataType::kBfloat16:
        std::memcpy(at, &kBfloat16[v], 2);
        break;
      case DataType::kFloat32: {
        const auto f = static_cast<float>(v);
        std::memcpy(at, &f, 4);
        break;
      }
      case DataType::kFloat64: {
        const auto d = static_cast<double>(v);
        std::memcpy(at, &d, 8);
        break;
      }
      default: {
        const std::uint64_t n = v;
        std::memcpy(at, &n, size);  // little endian: the low bytes
      }
    }
  }
}

void reduceIntoBench(benchmark::State& state, DataType type, ReduceOpKind kind, ReduceIsa isa) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  const std::size_t count = bytes / dataTypeSize(type);
  PageAlignedBuffer dst(bytes);
  PageAlignedBuffer src(bytes);
  fillSmallValues(dst.data(), count, type, /*zero=*/true);
  fillSmallValues(src.data(), count, type, /*zero=*/false);
  const ReduceOp op(kind);
  for (auto _ : state) {
    detail::reduceWithIsa(isa, dst.data(), dst.data(), src.data(), count, type, op);
    benchmark::ClobberMemory();
  }
  // Decimal units (G = 1e9), as reduce_bw.c prints them; SetBytesProcessed would show GiB/s.
  state.counters["bytes_per_second"] = benchmark::Counter(
      3.0 * static_cast<double>(count * dataTypeSize(type)),
      benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
  std::string label = "r+w bytes";
  if (isa == detail::selectedReduceIsa()) label += ", dispatched";
  state.SetLabel(label);
}

void copyBench(benchmark::State& state, collx::detail::CopyFunction copy) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  PageAlignedBuffer dst(bytes);
  PageAlignedBuffer src(bytes);
  std::memset(src.data(), 1, bytes);
  std::memset(dst.data(), 0, bytes);
  for (auto _ : state) {
    copy(dst.data(), src.data(), bytes);
    benchmark::ClobberMemory();
  }
  state.counters["bytes_per_second"] =
      benchmark::Counter(static_cast<double>(bytes), benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::kIs1000);
  state.SetLabel("bytes copied");
}

struct Case {
  DataType type;
  ReduceOpKind op;
};
constexpr Case kCases[] = {
    {DataType::kFloat32, ReduceOpKind::kSum},  {DataType::kFloat16, ReduceOpKind::kSum},
    {DataType::kBfloat16, ReduceOpKind::kSum}, {DataType::kInt8, ReduceOpKind::kSum},
    {DataType::kFloat64, ReduceOpKind::kMax},
};

void registerAll() {
  for (const Case& c : kCases) {
    for (ReduceIsa isa : {ReduceIsa::kAvx512, ReduceIsa::kAvx2, ReduceIsa::kScalar}) {
      if (!detail::reduceIsaAvailable(isa)) continue;
      const std::string name = std::string("reduceInto/") + dataTypeName(c.type) + "_" +
                               reduceOpKindName(c.op) + "/" + detail::reduceIsaName(isa);
      benchmark::RegisterBenchmark(name.c_str(), reduceIntoBench, c.type, c.op, isa)
          ->Arg(64 << 10)
          ->Arg(1 << 20)
          ->Arg(64 << 20)
          ->Unit(benchmark::kMicrosecond);
    }
  }
  for (const auto& [name, copy] : collx::detail::copyPaths()) {
    benchmark::RegisterBenchmark((std::string("copy/") + name).c_str(), copyBench, copy)
        ->Arg(4 << 10)
        ->Arg(64 << 10)
        ->Arg(1 << 20)
        ->Arg(64 << 20)
        ->Unit(benchmark::kMicrosecond);
  }
}

}  // namespace
}  // namespace collx::algorithms

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  collx::algorithms::registerAll();
  benchmark::AddCustomContext("collx_reduce_isa", collx::algorithms::reduceIsa());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
