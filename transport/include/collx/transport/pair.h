// Pair: this rank's connection to one peer, over one transport.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "collx/transport/request.h"

namespace collx::transport {

class Pair {
 public:
  explicit Pair(int peer) : peer_(peer) {}
  virtual ~Pair() = default;
  Pair(const Pair&) = delete;
  Pair& operator=(const Pair&) = delete;

  int peer() const noexcept { return peer_; }

  // Posts a send or a receive (request.kind). Non-blocking; called on the thread that drives
  // progress. The request may complete before post() returns. Throws collx::Error when the
  // pair is broken or the message contradicts what the peer announced (MismatchError).
  virtual void post(Request& request) = 0;

  // "tcp 127.0.0.1:40123", "self": for error messages.
  virtual std::string describe() const = 0;

  // For the mesh's liveness checks (on the thread that drives progress): whether requests
  // are in flight with the peer, and a count that grows whenever anything arrives from it.
  virtual bool busy() const noexcept { return false; }
  // After a failure (every request ended): the pair starts afresh in the mesh's new epoch
  // (Mesh::reform), its protocol state as new, over the same connection. Default: nothing
  // to do.
  virtual void reset() {}
  // Ends the pair in this generation: every request in flight fails with `error`, and it is
  // neither read nor polled again (Mesh::drop). Default: nothing to end.
  virtual void drop(const Error& error) noexcept { (void)error; }
  // Frames of another generation read and dropped (for tests).
  virtual std::uint64_t staleFrames() const noexcept { return 0; }
  virtual std::uint64_t arrivals() const noexcept { return 0; }

 private:
  int peer_;
};

}  // namespace collx::transport
