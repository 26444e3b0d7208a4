// The words of a JSON parse error (internal): nlohmann-json's parse_error::what() reads
// "[json.exception.parse_error.101] parse error at line 1, column 2: syntax error ..."; collx's
// messages keep the position and what is wrong, without the library's prefix (also for its
// other exceptions' "[json.exception.out_of_range.406] number overflow parsing '1e999'").
#pragma once

#include <string>
#include <string_view>

namespace collx {

inline std::string jsonErrorText(std::string_view what) {
  constexpr std::string_view kAt = "parse error at ";
  if (auto pos = what.find(kAt); pos != std::string_view::npos) {
    what.remove_prefix(pos + kAt.size());
  } else if (what.rfind("[json.exception.", 0) == 0) {  // out_of_range: "number overflow ..."
    if (auto end = what.find("] "); end != std::string_view::npos) what.remove_prefix(end + 2);
  }
  return std::string(what);
}

}  // namespace collx
