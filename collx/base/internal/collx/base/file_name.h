// A text as part of a file name (internal): letters, digits, '.', '_' and '-' stay, anything
// else becomes '_' (a job id or a round's name in the names of trace and report files).
#pragma once

#include <string>

namespace collx {

inline std::string fileNamePart(std::string text) {
  for (char& c : text) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) c = '_';
  }
  return text.empty() ? "_" : text;
}

}  // namespace collx
