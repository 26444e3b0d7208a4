// The one parser of each kind of quantity that users write (in environment variables, tool
// flags, rules files), so that "64K" or "30s" means the same everywhere in collx.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace collx {

// Byte sizes written in code: 64 * kKiB is an unsigned 64-bit product, where 64 * 1024 is an
// int one (which overflows past 2 GiB before it is widened).
inline constexpr std::uint64_t kKiB = 1024;
inline constexpr std::uint64_t kMiB = 1024 * kKiB;

// A whole decimal integer in [min, max]. Throws InvalidArgument naming `what` (the variable
// or flag) and the text.
std::int64_t parseInt(std::string_view text, std::int64_t min, std::int64_t max,
                      std::string_view what);

// A duration: "30", "30s", "500ms", "250us", "100ns", "2m", "1h", "1.5" (a plain number is
// seconds), below about 290 years. Throws InvalidArgument naming `what`.
std::chrono::nanoseconds parseDurationNs(std::string_view text, std::string_view what);

// The same, rounded to the nearest millisecond: what timeouts and grace periods take.
std::chrono::milliseconds parseDuration(std::string_view text, std::string_view what);

// A byte size: a number with an optional unit, powers of two: B, K/KiB, M/MiB, G/GiB,
// T/TiB (k is K). "1.5M" is 1572864. Throws InvalidArgument naming `what`.
std::uint64_t parseBytes(std::string_view text, std::string_view what);

// The largest exact unit: 65536 -> "64 KiB", 1000 -> "1000 B", UINT64_MAX -> "inf".
std::string formatBytes(std::uint64_t bytes);

// "0-4,6,7": ranks in increasing order, once each, runs of three or more as ranges.
std::string rankRanges(const std::vector<int>& ranks);

}  // namespace collx
