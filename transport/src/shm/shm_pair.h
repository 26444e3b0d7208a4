// ShmPair: the shared-memory medium under the pair protocol (protocol/protocol_pair.h) for
// one peer on this host.
//
// Each direction is a single-producer single-consumer ring in the receiver's arena
// (arena.h): frames (protocol/frame.h), each followed by its payload padded to 64 bytes,
// published by advancing the monotonic `tail` (release) and consumed by advancing `head`.
//
// The medium reads announced messages straight out of the sender's memory (pulls): an RTS
// carries the sender's buffer address, and the receiver copies the message once, straight
// into its receive buffer (process_vm_readv, or memcpy when the peer is a thread of this
// process), then the protocol answers DONE. Where the receiver cannot read the sender's
// memory (the CMA probe at connect failed: seccomp, Yama ptrace_scope, another user; or
// COLLX_SHM_CMA=0) the protocol asks with READY and the sender pushes the message through
// the ring in DATA pieces.
//
// Failures and closing travel in the arena header, not in the ring (which may be full): a
// rank that fails writes its error there and rings every peer; a peer that sees it raises
// that error naming the same culprit. A rank that closes its context sets "closed"; a peer
// that still waits for it then fails. A peer process that dies (pidfd readable) is an
// IoError naming it, after its last frames were read.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "arena.h"
#include "collx/base/error.h"
#include "collx/transport/link.h"
#include "protocol/protocol_pair.h"

namespace collx::transport::shm {

struct ShmPairOptions {
  std::uint64_t creditWindow = 1u << 20;
  std::uint64_t dataChunkBytes = 64u << 10;  // DATA pieces (ring copy)
  std::uint64_t pullChunkBytes = 4u << 20;   // one process_vm_readv / memcpy
  bool cma = true;                           // may read the peer's memory
};

// What the device learned about the peer while probing it.
struct PeerView {
  int rank = -1;
  pid_t pid = 0;
  bool samePid = false;
  bool cma = false;  // this rank can read the peer's memory
  std::shared_ptr<Mapping> mapping;
  Layout layout;
  sockaddr_un bell{};
  socklen_t bellLength = 0;
};

class ShmPair final : public ProtocolPair {
 public:
  ShmPair(LinkState& link, const ShmPairOptions& options, const Mapping& self,
          const Layout& selfLayout, PeerView peer, int bellSocket);
  ~ShmPair() override;

  std::string describe() const override;

  // Moves what can move now (reads the inbound ring within `budget` bytes, copies pulls,
  // writes queued frames). Throws collx::Error (see the class comment).
  bool progress(std::uint64_t& budget);
  // Whether progress() would find something to do now (checked after `sleeping` was set).
  bool wouldWake();
  // The peer's process ended: raises the error it left, or that it died, unless it closed
  // its context with nothing left in flight with this rank.
  void peerExited();
  // Rings the peer's doorbell (it is told to look at this rank's header).
  void ring() noexcept;

  pid_t peerPid() const noexcept { return peer_.pid; }
  // Whether the peer closed its context (its arena says so).
  bool peerClosedArena() const noexcept;
  bool samePid() const noexcept { return peer_.samePid; }
  bool exited() const noexcept { return exited_; }

  // The eager limit both ends of a pair use: the smaller of their options, and small enough
  // that a message fits twice in either's rings.
  static std::uint64_t agreedEagerLimit(const ArenaHeader& a, const ArenaHeader& b);

 protected:
  const char* medium() const noexcept override { return "shm"; }
  void sendFrame(const Frame& frame, const std::uint8_t* payload, Transfer* transfer) override;
  void flushOut() override;
  bool outputQueued() const noexcept override { return !control_.empty() || !data_.empty(); }
  void push(Transfer& transfer, const Frame& ready) override;
  bool pulls() const noexcept override { return options_.cma && peer_.cma; }
  void pull(Transfer& transfer) override;
  void describeSend(const Transfer& transfer, Frame& rts) override;
  void dropQueued() noexcept override;

 private:
  struct Out {
    Frame frame;
    const std::uint8_t* payload = nullptr;
    std::uint64_t payloadLength = 0;
    Transfer* transfer = nullptr;  // sent once the frame is in the ring
  };
  struct Piece {  // a message going out as DATA pieces
    Transfer* transfer;
    std::uint32_t xfer;  // the receiver's id
  };

  static std::uint64_t padded(std::uint64_t length) { return (length + 63) & ~std::uint64_t{63}; }

  bool receive(std::uint64_t& budget);
  bool flush();
  bool room(std::uint64_t bytes);
  void writeFrame(Frame frame, const std::uint8_t* payload, std::uint64_t length);
  void notifyPeer();
  bool pumpPulls(std::uint64_t& budget);
  void checkPeerState(std::uint32_t state);
  [[noreturn]] void raisePeerFailure();
  // The peer failed in the generation this rank's pairs are in (it may have re-formed since:
  // its state says open again, for the next one).
  bool peerFailedInThisGeneration() const noexcept;

  ShmPairOptions options_;
  PeerView peer_;
  int bellSocket_;
  ArenaHeader* self_;
  ArenaHeader* peerHeader_;

  // Inbound: this rank's arena, the ring the peer writes.
  RingControl* in_;
  std::uint8_t* inData_;
  std::uint64_t inBytes_;
  std::uint64_t inHead_ = 0;
  // Outbound: the peer's arena, the ring this rank writes.
  RingControl* out_;
  std::uint8_t* outData_;
  std::uint64_t outBytes_;
  std::uint64_t outTail_ = 0;
  std::uint64_t outHeadSeen_ = 0;
  std::uint64_t minPiece_ = 0;  // a smaller DATA piece waits for more room
  bool wrote_ = false;          // frames written since the peer was last notified
  bool blocked_ = false;        // output waits for room in the peer's ring

  std::deque<Out> control_;
  std::deque<Piece> data_;
  std::deque<Transfer*> pulls_;

  bool exited_ = false;  // the peer's process ended (after closing)
};

}  // namespace collx::transport::shm
