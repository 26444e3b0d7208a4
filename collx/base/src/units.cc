#include "collx/base/units.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "collx/base/echo.h"
#include "collx/base/error.h"

namespace collx {

namespace {

[[noreturn]] void badValue(std::string_view what, std::string_view text,
                           const std::string& expected) {
  throw InvalidArgument(Where{-1, "config", -1},
                        std::string(what) + "='" + echoText(text) + "': expected " + expected);
}

// The number in front of a unit ("1.5" of "1.5M"): digits with at most one point.
double leadingNumber(std::string_view text, std::string_view what, const std::string& expected,
                     std::string_view& unit) {
  std::size_t unitPos = text.find_first_not_of("0123456789.");
  std::string_view number = text.substr(0, unitPos);
  unit = unitPos == std::string_view::npos ? "" : text.substr(unitPos);
  if (number.empty() || std::count(number.begin(), number.end(), '.') > 1) {
    badValue(what, text, expected);
  }
  std::string copy(number);
  char* parsedEnd = nullptr;
  errno = 0;
  double value = std::strtod(copy.c_str(), &parsedEnd);
  if (errno != 0 || parsedEnd != copy.c_str() + copy.size() || !std::isfinite(value)) {
    badValue(what, text, expected);
  }
  return value;
}

}  // namespace

std::int64_t parseInt(std::string_view text, std::int64_t min, std::int64_t max,
                      std::string_view what) {
  std::int64_t value = 0;
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(begin, end, value);
  if (text.empty() || ec != std::errc() || ptr != end) {
    badValue(what, text, "an integer");
  }
  if (value < min || value > max) {
    badValue(what, text,
             "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  return value;
}

std::chrono::nanoseconds parseDurationNs(std::string_view text, std::string_view what) {
  const std::string expected = "a duration such as 30s, 500ms, 10us, 2m, 1h or a number of seconds";
  std::string_view unit;
  const double value = leadingNumber(text, what, expected, unit);
  double scale = 0;  // nanoseconds per unit
  if (unit.empty() || unit == "s") {
    scale = 1e9;
  } else if (unit == "ms") {
    scale = 1e6;
  } else if (unit == "us") {
    scale = 1e3;
  } else if (unit == "ns") {
    scale = 1;
  } else if (unit == "m" || unit == "min") {
    scale = 60e9;
  } else if (unit == "h") {
    scale = 3600e9;
  } else {
    badValue(what, text, expected);
  }
  const double ns = value * scale;
  if (ns > 9e18) badValue(what, text, "a duration under 285 years");
  return std::chrono::nanoseconds(static_cast<std::int64_t>(std::llround(ns)));
}

std::chrono::milliseconds parseDuration(std::string_view text, std::string_view what) {
  return std::chrono::round<std::chrono::milliseconds>(parseDurationNs(text, what));
}

std::uint64_t parseBytes(std::string_view text, std::string_view what) {
  const std::string expected = "a size such as 4096, 64K, 1.5M, 2GiB (powers of two)";
  std::string_view unit;
  const double value = leadingNumber(text, what, expected, unit);
  double scale = 0;
  if (unit.empty() || unit == "B") {
    scale = 1;
  } else if (unit == "K" || unit == "k" || unit == "KiB") {
    scale = 1024.0;
  } else if (unit == "M" || unit == "MiB") {
    scale = 1024.0 * 1024;
  } else if (unit == "G" || unit == "GiB") {
    scale = 1024.0 * 1024 * 1024;
  } else if (unit == "T" || unit == "TiB") {
    scale = 1024.0 * 1024 * 1024 * 1024;
  } else {
    badValue(what, text, expected);
  }
  const double bytes = value * scale;
  if (bytes > 9.0e18) badValue(what, text, "a size below 8 EiB");
  return static_cast<std::uint64_t>(std::llround(bytes));
}

std::string formatBytes(std::uint64_t bytes) {
  if (bytes == ~std::uint64_t{0}) return "inf";
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  std::uint64_t v = bytes;
  while (u < 4 && v >= 1024 && v % 1024 == 0) {
    v /= 1024;
    ++u;
  }
  return std::to_string(v) + " " + units[u];
}

std::string rankRanges(const std::vector<int>& ranks) {
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  std::string out;
  for (std::size_t i = 0; i < sorted.size();) {
    std::size_t j = i;
    while (j + 1 < sorted.size() && sorted[j + 1] == sorted[j] + 1) ++j;
    if (!out.empty()) out += ",";
    if (j >= i + 2) {
      out += std::to_string(sorted[i]) + "-" + std::to_string(sorted[j]);
      i = j + 1;
    } else {
      out += std::to_string(sorted[i]);
      ++i;
    }
  }
  return out;
}

}  // namespace collx
