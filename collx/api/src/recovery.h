// What the recovery operations (Context::revoke, Context::agree) keep in the context's
// namespace of the store, shared by the context and the hang report's watcher.
//
// An agreement (round k of a context, its sub-context number s) under "agree/<s>/<k>/":
// "in/<rank>" each rank's flags and the failures it knows, "decision" the first proposal
// (compareSet), "read" the count of ranks that read it (the last erases the entries).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>

namespace collx::detail {

// A revoke: "<rank>\n<the error's text>", written by the rank that revoked, read by every
// rank's watcher (ranks that no connection reaches learn it so).
inline constexpr const char* kRevokedKey = "revoked";

inline std::string formatRevoked(int rank, const std::string& text) {
  return std::to_string(rank) + "\n" + text;
}

// The rank and text of a revoke record; rank -1 and the whole value as text when it is not
// one (a value in the store is outside input).
inline void parseRevoked(const std::string& value, int& rank, std::string& text) {
  const std::size_t line = value.find('\n');
  char* end = nullptr;
  const long parsed = line == std::string::npos ? -1 : std::strtol(value.c_str(), &end, 10);
  if (line == std::string::npos || end != value.c_str() + line || parsed < 0 || parsed > 1L << 30) {
    rank = -1;
    text = value.substr(0, 1024);
    return;
  }
  rank = static_cast<int>(parsed);
  text = value.substr(line + 1, 1024);
}

// An agreement's entry or answer: "1 <flags, 16 hex digits> <failed ranks, ascending, comma-
// separated>". decodeAgreement() reads one of a context of `size` ranks (outside input:
// false for anything else).
std::string encodeAgreement(std::uint64_t flags, const std::set<int>& failed);
bool decodeAgreement(const std::string& text, int size, std::uint64_t& flags,
                     std::set<int>& failed);

}  // namespace collx::detail
