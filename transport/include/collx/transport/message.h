// What travels between two ranks: a message's key (which collective call and which step of
// it, or which point-to-point tag) and its fingerprint (what each side believes the call is).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace collx::transport {

enum class Space : std::uint8_t {
  kCollective = 0,    // seq = the context's collective sequence number
  kPointToPoint = 1,  // seq = the user's tag; equal keys match in posting order
};

// A sub-context (Context::split) shares its parent's pairs: its messages carry its number in
// the high bits of `seq` (a collective's sequence number or a point-to-point tag below 2^40),
// so that they never meet the parent's or another sub-context's (0: the parent's own).
inline constexpr int kSubContextShift = 40;
inline constexpr std::uint64_t kSeqMask = (std::uint64_t{1} << kSubContextShift) - 1;
// The largest sub-context number: kSubContextShift bits up to, not including, bit 62 (the
// library's own exchanges take seqs from ~0 down).
inline constexpr std::uint64_t kMaxSubContext = (std::uint64_t{1} << (62 - kSubContextShift)) - 1;
inline constexpr std::uint64_t subContextOf(std::uint64_t seq) noexcept {
  return seq >> kSubContextShift;
}
// A seq as errors show it: "7", "7 of sub-context 3" (the library's own seqs, from 2^62 up,
// as they are).
inline std::string seqText(std::uint64_t seq) {
  if (seq >= (std::uint64_t{1} << 62) || subContextOf(seq) == 0) return std::to_string(seq);
  return std::to_string(seq & kSeqMask) + " of sub-context " + std::to_string(subContextOf(seq));
}

// Identifies a message between a sender and a receiver. A receive matches the oldest
// message with an equal key from its peer.
struct MessageKey {
  std::uint64_t seq = 0;
  std::uint32_t step = 0;
  Space space = Space::kCollective;

  bool operator==(const MessageKey& o) const {
    return seq == o.seq && step == o.step && space == o.space;
  }
};

struct MessageKeyHash {
  std::size_t operator()(const MessageKey& k) const noexcept {
    return std::hash<std::uint64_t>()(k.seq * 0x9e3779b97f4a7c15ull ^
                                      (std::uint64_t{k.step} << 8 | std::uint64_t(k.space)));
  }
};

// What the collective call is, as each side sees it: sender and receiver must agree, and a
// message whose fingerprint differs from the receiver's is a MismatchError on both sides.
struct Fingerprint {
  std::uint8_t coll = 0;   // collective kind (the API layer names them)
  std::uint8_t dtype = 0;  // DataType
  std::uint8_t op = 0;     // ReduceOpKind (0 where there is none)
  std::int32_t root = -1;  // -1 where there is none
  std::uint64_t count = 0;

  bool operator==(const Fingerprint& o) const {
    return coll == o.coll && dtype == o.dtype && op == o.op && root == o.root && count == o.count;
  }
  bool operator!=(const Fingerprint& o) const { return !(*this == o); }
};

// Words a key and fingerprint for error messages ("allreduce#42 float32x1024"); provided by
// the API layer, which knows the names of collectives.
using Describer = std::function<std::string(const MessageKey&, const Fingerprint&)>;

// A fallback describer: "collective 3 #42 step 1 dtype 6 count 1024".
std::string describePlain(const MessageKey& key, const Fingerprint& fp);

}  // namespace collx::transport
