// The words of a JSON parse error (internal): nlohmann-json's parse_error::what() reads
// "[json.exception.parse_error.101] parse error at line 1, column 2: syntax error ..."; collx's
// messages keep the position and what is wrong, without the library's prefix.
#pragma once

#include <string>
#include <string_view>

namespace collx {

inline std::string jsonErrorText(std::string_view what) {
  constexpr std::string_view kAt = "parse error at ";
  if (auto pos = what.find(kAt); pos != std::string_view::npos)
    what.remove_prefix(pos + kAt.size());
  return std::string(what);
}

}  // namespace collx
