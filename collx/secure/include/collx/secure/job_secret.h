// JobSecret: the secret every rank of a job holds, and what proves it without showing it.
//
// A job's ranks get the same secret from COLLX_JOB_SECRET, or from COLLX_JOB_SECRET_FILE (a
// file only its owner can read); collx-run makes one for a single-node job and hands it to
// its ranks through the environment. The secret itself never leaves this class: there is no
// accessor and no text form, and it never crosses the network. What does cross it are tags:
// HMAC-SHA256 under a key made of the secret for one purpose (the TCP store's handshake,
// signed store values, pair handshakes, collx-run's own keys), over the parts of a message,
// each prefixed by its length so that no two lists of parts read alike.
//
// Internal to collx's layers (C++20), never installed.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "collx/base/config.h"

namespace collx::secure {

using Tag = std::array<std::uint8_t, 32>;    // an HMAC-SHA256
using Nonce = std::array<std::uint8_t, 32>;  // from the kernel's random source

// What a key is for: a tag made for one purpose never passes for another.
enum class Purpose : int { kStore = 0, kValue, kPair, kLauncher, kCount };

// A part of a message to tag: bytes, or text.
class Part {
 public:
  Part(std::span<const std::uint8_t> bytes) : bytes_(bytes) {}  // NOLINT: implicit
  Part(std::string_view text)                                   // NOLINT: implicit
      : bytes_(reinterpret_cast<const std::uint8_t*>(text.data()), text.size()) {}
  Part(const char* text) : Part(std::string_view(text)) {}         // NOLINT: implicit
  Part(const std::string& text) : Part(std::string_view(text)) {}  // NOLINT: implicit
  template <std::size_t N>
  Part(const std::array<std::uint8_t, N>& bytes) : bytes_(bytes.data(), N) {}  // NOLINT
  std::span<const std::uint8_t> bytes() const noexcept { return bytes_; }

 private:
  std::span<const std::uint8_t> bytes_;
};

class JobSecret {
 public:
  // The job's secret as the environment gives it (COLLX_JOB_SECRET or COLLX_JOB_SECRET_FILE),
  // or nullptr when neither is set. Throws InvalidArgument, never showing the secret: both
  // set, a secret shorter than 16 bytes or longer than 1024, a file that is not a regular
  // file of this user's or that its group or others may read ("chmod 600 <file>").
  static std::shared_ptr<const JobSecret> fromConfig(const Config& config);
  // A secret given in code (collx-run's own, tests); `origin` says where it came from.
  static std::shared_ptr<const JobSecret> fromText(std::string_view secret, std::string origin);

  JobSecret(const JobSecret&) = delete;
  JobSecret& operator=(const JobSecret&) = delete;
  ~JobSecret();

  // Where it came from, for logs: "COLLX_JOB_SECRET", "COLLX_JOB_SECRET_FILE=/path", ...
  const std::string& origin() const noexcept { return origin_; }

  // The tag of `parts` under `purpose`'s key.
  Tag mac(Purpose purpose, std::initializer_list<Part> parts) const;
  // Whether `tag` is that tag (compared in constant time).
  bool verify(Purpose purpose, std::initializer_list<Part> parts, const Tag& tag) const;

 private:
  JobSecret(std::string_view secret, std::string origin);
  std::array<Tag, static_cast<std::size_t>(Purpose::kCount)> keys_;
  std::string origin_;
};

// HMAC-SHA256(key, data) (RFC 2104; the tests check it against RFC 4231).
Tag hmacSha256(std::span<const std::uint8_t> key, std::span<const std::uint8_t> data);
// Bytes from the kernel's random source (getrandom); throws IoError if it fails.
void randomBytes(std::span<std::uint8_t> out);
Nonce randomNonce();
// How a user makes a secret file, for the messages that ask for one.
inline constexpr const char* kMakeSecretFile =
    "umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n' > ~/.collx-secret";

// A new secret: 32 random bytes as 64 hex digits (what collx-run makes for a job).
std::string newSecretText();
// Whether a and b hold the same bytes, in time that depends on their size only.
bool sameBytes(std::span<const std::uint8_t> a, std::span<const std::uint8_t> b) noexcept;

}  // namespace collx::secure
