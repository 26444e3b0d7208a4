// What every pair of a mesh shares, whatever its medium: the link state (the collectives in
// flight, for the early mismatch check, and how to describe a message) and the job hash the
// handshakes carry.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "collx/transport/message.h"

namespace collx::transport {

using Clock = std::chrono::steady_clock;

// A hash of a job id and generation: what the transports write into their handshakes and
// arenas, so that a connection or arena of another job (or generation) is refused.
std::uint64_t jobHash(const std::string& job, std::int64_t generation);

// State every pair of a mesh shares.
struct LinkState {
  int rank = 0;
  Describer describer;
  // The generation the pairs carry, mod 256 (every frame says its sender's; a frame of
  // another is dropped): the mesh's, then each reform()'s.
  std::uint8_t epoch = 0;
  // Collectives in progress on this rank (sequence number, fingerprint): a message of one
  // of them with another fingerprint is a mismatch at once, whatever its step. Few are in
  // flight at a time, so a flat list beats a hash map (no allocation per call).
  std::vector<std::pair<std::uint64_t, Fingerprint>> active;

  void addActive(std::uint64_t seq, const Fingerprint& fp) { active.emplace_back(seq, fp); }
  void removeActive(std::uint64_t seq) {
    for (std::size_t i = 0; i < active.size(); ++i) {
      if (active[i].first == seq) {
        active[i] = active.back();
        active.pop_back();
        return;
      }
    }
  }
  const Fingerprint* findActive(std::uint64_t seq) const {
    for (const auto& [s, fp] : active) {
      if (s == seq) return &fp;
    }
    return nullptr;
  }

  std::string describe(const MessageKey& key, const Fingerprint& fp) const;
};

}  // namespace collx::transport
