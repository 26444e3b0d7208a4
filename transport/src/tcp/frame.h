// The TCP transport's frame header (internal). Every frame on a connection starts with one.
//
//   EAGER   small message, payload follows (sent when the receiver has credit for it)
//   RTS     "ready to send": a message the sender holds (large, or small without credit)
//   READY   the receiver posted a buffer for a message (xfer = its transfer id)
//   DATA    a piece of a message the receiver announced READY for (xfer, offset, length)
//   CREDIT  returns eager credit (also piggybacked on every header in `credit`)
//   ERROR   the sender failed a collective against us (payload: ErrorKind byte + text)
//   GOODBYE the sender is closing its context: end of stream is not a failure
#pragma once

#include <cstdint>
#include <cstring>

#include "collx/transport/message.h"

namespace collx::transport::tcp {

enum class FrameType : std::uint8_t {
  kEager = 1,
  kRts = 2,
  kReady = 3,
  kData = 4,
  kCredit = 5,
  kError = 6,
  kGoodbye = 7,
};

inline constexpr std::uint32_t kFrameMagic = 0x434c5846;  // "FXLC"

struct FrameHeader {
  std::uint8_t type = 0;
  std::uint8_t space = 0;
  std::uint8_t coll = 0;
  std::uint8_t dtype = 0;
  std::uint8_t op = 0;
  std::uint8_t reserved[3] = {};
  std::uint32_t step = 0;
  std::int32_t root = -1;
  std::uint64_t seq = 0;
  std::uint64_t count = 0;
  std::uint64_t length = 0;
  std::uint64_t offset = 0;
  std::uint32_t xfer = 0;
  std::uint32_t credit = 0;
  std::uint32_t magic = kFrameMagic;
  std::uint32_t reserved2 = 0;

  MessageKey key() const { return MessageKey{seq, step, static_cast<Space>(space)}; }
  Fingerprint fingerprint() const { return Fingerprint{coll, dtype, op, root, count}; }
  void setMessage(const MessageKey& k, const Fingerprint& fp) {
    seq = k.seq;
    step = k.step;
    space = static_cast<std::uint8_t>(k.space);
    coll = fp.coll;
    dtype = fp.dtype;
    op = fp.op;
    root = fp.root;
    count = fp.count;
  }
};
static_assert(sizeof(FrameHeader) == 64, "the frame header is 64 bytes on the wire");

}  // namespace collx::transport::tcp
