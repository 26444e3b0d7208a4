// collx-test-worker: a rank for the process tests, bootstrapped from the environment.
//
//   collx-test-worker loop COUNT ITERATIONS   allreduce float32 COUNT elements ITERATIONS
//                                             times (0: until killed), checking every result;
//                                             prints "ready" after the first one
//   collx-test-worker count COUNT             one allreduce of COUNT float32 elements
//
// Exit codes name the outcome: 0 ok, 10 IoError, 11 TimeoutError, 12 MismatchError,
// 13 Aborted, 14 InvalidArgument, 15 another collx error, 20 a wrong result, 2 usage.
// The error's message goes to stderr.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "collx/collx.h"

namespace {

int codeOf(const collx::Error& e) {
  switch (e.kind()) {
    case collx::ErrorKind::kIo: return 10;
    case collx::ErrorKind::kTimeout: return 11;
    case collx::ErrorKind::kMismatch: return 12;
    case collx::ErrorKind::kAborted: return 13;
    case collx::ErrorKind::kInvalidArgument: return 14;
    default: return 15;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: collx-test-worker loop COUNT ITERATIONS | count COUNT\n");
    return 2;
  }
  std::string mode = argv[1];
  const std::uint64_t count = std::stoull(argv[2]);
  const long iterations = mode == "loop" && argc > 3 ? std::stol(argv[3]) : 1;
  try {
    auto ctx = collx::init();
    const int P = ctx->size();
    std::vector<float> v(count);
    for (long it = 0; iterations == 0 || it < iterations; ++it) {
      for (std::uint64_t i = 0; i < count; ++i) v[i] = static_cast<float>(ctx->rank() + i % 7);
      collx::allreduce(*ctx, v.data(), v.data(), count, collx::DataType::kFloat32);
      for (std::uint64_t i = 0; i < count; ++i) {
        float expected = static_cast<float>(P * (P - 1) / 2 + P * static_cast<int>(i % 7));
        if (v[i] != expected) {
          std::fprintf(stderr, "rank %d: element %llu is %g, expected %g\n", ctx->rank(),
                       static_cast<unsigned long long>(i), v[i], expected);
          return 20;
        }
      }
      if (it == 0) {
        std::printf("ready\n");
        std::fflush(stdout);
      }
    }
    std::printf("done\n");
    return 0;
  } catch (const collx::Error& e) {
    std::fprintf(stderr, "collx-test-worker: %s: %s\n", collx::errorKindName(e.kind()), e.what());
    return codeOf(e);
  }
}
