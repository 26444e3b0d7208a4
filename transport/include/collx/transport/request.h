// A send or a receive in flight between this rank and one peer: what its caller sets. (The
// pair protocol keeps its own bookkeeping; see transport/src/protocol/protocol_pair.h.)
#pragma once

#include <cstdint>

#include "collx/transport/message.h"

namespace collx {
class Error;
}

namespace collx::transport {

class Request {
 public:
  enum class Kind : std::uint8_t { kSend, kRecv };

  virtual ~Request() = default;

  // Called by the transport exactly once, on the thread that drives progress: with nullptr
  // when the request completed (a send's bytes were handed over; a receive's bytes landed),
  // or with the error that ended it. After this call the transport never touches the
  // request or its buffer again.
  virtual void onComplete(const Error* error) = 0;

  Kind kind = Kind::kSend;
  int peer = -1;
  void* data = nullptr;  // a send reads it, a receive writes it, until completion
  std::uint64_t length = 0;
  MessageKey key;
  Fingerprint fingerprint;
};

}  // namespace collx::transport
