// A value from outside the process as an error message repeats it (internal): at most
// `limit` bytes, then how long it was, so that a hostile or mistaken value cannot flood a
// log line.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace collx {

inline constexpr std::size_t kEchoBytes = 200;

inline std::string echoText(std::string_view text, std::size_t limit = kEchoBytes) {
  if (text.size() <= limit) return std::string(text);
  return std::string(text.substr(0, limit)) + "... (" + std::to_string(text.size()) + " bytes)";
}

}  // namespace collx
