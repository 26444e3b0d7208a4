// What every harness shares: the input as text, and the one kind of failure a parser may
// report. collx::Error (InvalidArgument, MismatchError, ...) is the parser refusing the input
// with a message, which is its job; any other exception escapes the harness and libFuzzer
// reports it, like a sanitizer's report or a crash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "collx/base/error.h"

namespace collx::fuzz {

inline std::string_view textOf(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Runs `parse`; a collx::Error is an accepted outcome, and its message must stay short.
template <typename F>
void refusedOrParsed(F&& parse, std::size_t maxMessage = 8192) {
  try {
    parse();
  } catch (const Error& e) {
    if (std::string_view(e.what()).size() > maxMessage) __builtin_trap();
  }
}

}  // namespace collx::fuzz
