// Exact scalar conversions between float32 and the two 16-bit float formats. They give the
// same bits as the x86 instructions the vector paths use (F16C vcvtph2ps / vcvtps2ph with
// round-to-nearest-even), including which NaN comes out: a NaN is quieted and keeps the top
// bits of its payload.
//
// Only the default-flag translation units include this (reduce.cc, reduce_scalar.cc): an
// inline function emitted by a file built with -mavx512f could be the copy the linker keeps.
#pragma once

#include <bit>
#include <cstdint>

namespace collx::algorithms::detail {

inline float halfToFloat(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1Fu;
  std::uint32_t mantissa = h & 0x3FFu;
  if (exponent == 0x1F) {  // infinity, or NaN (quieted like vcvtph2ps does)
    const std::uint32_t quiet = mantissa != 0 ? 0x400000u : 0u;
    return std::bit_cast<float>(sign | 0x7F800000u | quiet | (mantissa << 13));
  }
  if (exponent != 0) {
    return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
  }
  if (mantissa == 0) return std::bit_cast<float>(sign);
  // Subnormal: normalize. The value is mantissa * 2^-24; every one is a normal float32.
  std::uint32_t e = 113;  // float32 biased exponent of 2^-14, before shifting
  while ((mantissa & 0x400u) == 0) {
    mantissa <<= 1;
    --e;
  }
  return std::bit_cast<float>(sign | (e << 23) | ((mantissa & 0x3FFu) << 13));
}

inline std::uint16_t floatToHalf(float f) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t magnitude = x & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u) {  // NaN: quiet, top 10 payload bits kept
    return static_cast<std::uint16_t>(sign | 0x7E00u | ((magnitude >> 13) & 0x3FFu));
  }
  if (magnitude >= 0x47800000u) return static_cast<std::uint16_t>(sign | 0x7C00u);  // >= 2^16
  if (magnitude >= 0x38800000u) {  // >= 2^-14: a normal half (or rounds up to infinity)
    // Round to nearest even at bit 13; a carry out of the mantissa bumps the exponent, which
    // is exactly what rounding up to the next binade (or to infinity) needs.
    const std::uint32_t rounded = magnitude + 0xFFFu + ((magnitude >> 13) & 1u);
    return static_cast<std::uint16_t>(sign | ((rounded - (112u << 23)) >> 13));
  }
  if (magnitude <= 0x33000000u) return sign;  // <= 2^-25: rounds to zero (2^-25 is a tie)
  // Subnormal half: the result is round(value / 2^-24).
  const std::uint32_t exponent = magnitude >> 23;  // 102..112
  const std::uint32_t mantissa = (magnitude & 0x7FFFFFu) | 0x800000u;
  const std::uint32_t shift = 126 - exponent;  // 14..24
  std::uint32_t q = mantissa >> shift;
  const std::uint32_t rest = mantissa & ((1u << shift) - 1);
  const std::uint32_t half = 1u << (shift - 1);
  if (rest > half || (rest == half && (q & 1u) != 0)) ++q;  // may carry into the smallest normal
  return static_cast<std::uint16_t>(sign | q);
}

inline float bfloat16ToFloat(std::uint16_t b) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

inline std::uint16_t floatToBfloat16(float f) noexcept {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(f);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) {  // NaN: quiet, top payload bits kept
    return static_cast<std::uint16_t>((bits >> 16) | 0x40u);
  }
  return static_cast<std::uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

}  // namespace collx::algorithms::detail
