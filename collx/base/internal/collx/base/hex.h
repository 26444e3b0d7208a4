// Bytes as hexadecimal text and back (internal): how addresses and protocol bytes appear in
// published records and error messages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace collx {

// "0a1b2c", or with a separator between bytes ("0a 1b 2c").
inline std::string hexBytes(const std::uint8_t* data, std::size_t size,
                            std::string_view separator = "") {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(size * (2 + separator.size()));
  for (std::size_t i = 0; i < size; ++i) {
    if (i > 0) out += separator;
    out += kDigits[data[i] >> 4];
    out += kDigits[data[i] & 15];
  }
  return out;
}

// Exactly 2 * size hexadecimal digits (either case) into `size` bytes; false for anything else.
inline bool parseHexBytes(std::string_view text, std::uint8_t* out, std::size_t size) {
  if (text.size() != 2 * size) return false;
  auto digit = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (std::size_t i = 0; i < size; ++i) {
    const int high = digit(text[2 * i]), low = digit(text[2 * i + 1]);
    if (high < 0 || low < 0) return false;
    out[i] = static_cast<std::uint8_t>(high << 4 | low);
  }
  return true;
}

}  // namespace collx
