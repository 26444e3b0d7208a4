// The sanitizer this build's suites run under, and how a test says it is left to the Release
// suite there.
//
// The sanitizer builds (COLLX_SANITIZE=address,undefined or thread: the sanitizer stages of
// `./dev.sh test`) run the suites labelled concurrency or process. What they leave out is
// chosen where a test is declared, never by a pattern over its name:
//   - the thread-rank suites' larger worlds are left out of the instantiation
//     (test::worldSizes() in world.h), as are the process suites' costlier transports;
//   - a single test skips itself, saying why: COLLX_SKIP_UNDER_SANITIZERS(why) or
//     COLLX_SKIP_UNDER_TSAN(why) as its first line (a skip without a reason is a bug);
//   - a ctest entry that is not a gtest binary carries the label no_tsan where it is added
//     (add_test), and the ThreadSanitizer stage runs `ctest -LE no_tsan`.
// tests/CMakeLists.txt defines COLLX_TEST_SANITIZER_ADDRESS or COLLX_TEST_SANITIZER_THREAD from
// COLLX_SANITIZE for every suite (UBSan alone, which does not slow a test down, is none).
#pragma once

namespace collx::test {

enum class Sanitizer { kNone, kAddress, kThread };

#if defined(COLLX_TEST_SANITIZER_THREAD)
inline constexpr Sanitizer kSanitizer = Sanitizer::kThread;
#elif defined(COLLX_TEST_SANITIZER_ADDRESS)
inline constexpr Sanitizer kSanitizer = Sanitizer::kAddress;
#else
inline constexpr Sanitizer kSanitizer = Sanitizer::kNone;
#endif

// "AddressSanitizer", "ThreadSanitizer" or "" (for the skips' messages).
inline constexpr const char* kSanitizerName = kSanitizer == Sanitizer::kThread ? "ThreadSanitizer"
                                              : kSanitizer == Sanitizer::kAddress
                                                  ? "AddressSanitizer"
                                                  : "";

}  // namespace collx::test

// The first line of a test that the sanitizer builds leave to the Release suite: a skip that
// says which sanitizer and why. `why` is streamed into the message.
#define COLLX_SKIP_UNDER_SANITIZERS(why)                                                          \
  do {                                                                                            \
    if (::collx::test::kSanitizer != ::collx::test::Sanitizer::kNone)                             \
      GTEST_SKIP() << "left to the Release suite under " << ::collx::test::kSanitizerName << ": " \
                   << why;                                                                        \
  } while (0)

// The same for ThreadSanitizer alone (3-5x slower than the Release build; ASan runs the test).
#define COLLX_SKIP_UNDER_TSAN(why)                                                \
  do {                                                                            \
    if (::collx::test::kSanitizer == ::collx::test::Sanitizer::kThread)           \
      GTEST_SKIP() << "left to the Release suite under ThreadSanitizer: " << why; \
  } while (0)
