// The frame: what every medium carries between two ranks for the pair protocol
// (protocol_pair.h). 64 bytes, one cache line; a medium may add its own framing around it
// but never changes its meaning.
//
//   EAGER    a small message; its payload (length bytes) follows the frame. Sent while the
//            receiver has credit for it (bytes it may have to hold before the receive is
//            posted).
//   RTS      "ready to send": a message the sender holds (large, or small without credit).
//            xfer: the sender's transfer id; address: where its bytes are, for a medium
//            that lets the receiver read them (shm), else 0.
//   READY    the receiver posted a buffer for a message and wants it pushed (xfer: the
//            receiver's transfer id; address and remote: where to write, for a medium that
//            writes into the peer's memory, e.g. RDMA).
//   DATA     a piece of a message pushed after READY: xfer (the receiver's id), offset,
//            length; the payload follows the frame. (A medium that writes the peer's memory
//            itself reports the bytes that landed instead.)
//   DONE     the receiver read an RTS message itself: the send completes (xfer: the sender's).
//   CREDIT   returns eager credit (every frame also carries returned credit in `credit`).
//   ERROR    the sender failed (root: the rank its error names; payload: the ErrorKind byte,
//            then the text).
//   GOODBYE  the sender closes its context: what follows its end is no failure.
//
// Every frame carries its sender's epoch (its generation mod 256): after the survivors of a
// failure go on in a new generation over the same connections (Mesh::reform), a frame of
// the old one that was still on its way is read and dropped, never delivered.
#pragma once

#include <cstdint>

#include "collx/transport/message.h"

namespace collx::transport {

enum class FrameType : std::uint8_t {
  kEager = 1,
  kRts = 2,
  kReady = 3,
  kData = 4,
  kDone = 5,
  kCredit = 6,
  kError = 7,
  kGoodbye = 8,
};

inline constexpr std::uint16_t kFrameMagic = 0x4346;  // "FC"
// The most payload a DATA frame carries (a medium's pieces are at most this): with the eager
// limit and an ERROR's text, what bounds a frame of an older generation, whose payload is
// read and dropped.
inline constexpr std::uint64_t kMostDataPiece = std::uint64_t{1} << 20;

struct Frame {
  FrameType type = FrameType::kCredit;
  std::uint8_t space = 0;
  std::uint8_t coll = 0;
  std::uint8_t dtype = 0;
  std::uint8_t op = 0;
  std::uint8_t epoch = 0;  // the sender's generation, mod 256 (LinkState::epoch)
  std::uint16_t magic = kFrameMagic;
  std::uint32_t step = 0;
  std::int32_t root = -1;
  std::uint64_t seq = 0;
  std::uint64_t count = 0;
  std::uint64_t length = 0;   // the message's bytes; DATA: the piece's; ERROR: the payload's
  std::uint64_t offset = 0;   // DATA: where the piece goes; READY: the medium's key (rkey)
  std::uint64_t address = 0;  // RTS: the sender's buffer; READY: the receiver's buffer
  std::uint32_t xfer = 0;     // a transfer id (see above)
  std::uint32_t credit = 0;   // eager credit returned with this frame

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
  // Frames whose payload follows them in the medium's stream.
  bool carriesPayload() const {
    return type == FrameType::kEager || type == FrameType::kData || type == FrameType::kError;
  }
};
static_assert(sizeof(Frame) == 64, "a frame is one cache line");

}  // namespace collx::transport
