// ProtocolPair: what a message between two ranks means, written once for every medium.
//
// The protocol (frame.h has the frames):
// - A send of at most `eagerLimit` bytes goes EAGER while the receiver has credit for it
//   (bytes the receiver may have to hold until its receive is posted: `creditWindow` per
//   direction, returned with every frame and by CREDIT). Any other send is announced with
//   RTS and waits: for READY, then the medium pushes the bytes into the receiver's buffer
//   (DATA frames, or a write into the peer's memory); or, on a medium that lets the
//   receiver read the sender's memory, for DONE once the receiver copied them.
// - A receive matches the oldest message with an equal key from its peer. What arrives
//   before its receive waits in the unexpected queue (an EAGER message's bytes within the
//   credit window, an RTS). A receive of more than `eagerLimit` bytes on a medium that
//   pushes says READY at once (receiver-ready), so that in a pipeline the data follows its
//   announcement without a round trip; its RTS, when it comes, is only checked.
// - Every arrival is checked against what this rank expects: a fingerprint or length that
//   differs, or a collective sequence number that this rank runs as another collective, is
//   a MismatchError naming both sides (the mesh then tells the peer).
// - failAll() ends every request in flight with an error and forgets its buffer; a peer that
//   closed (GOODBYE, or the medium's own signal) with messages in flight with this rank, or
//   that left, is an IoError naming it.
//
// A medium derives from ProtocolPair, moves bytes and nothing else (spdlog's base_sink
// shape: the shared logic here, the medium overrides protected hooks only):
// - sendFrame(): put a frame (and an EAGER or ERROR payload) on the way to the peer, in
//   order; flushOut() at the end of every post().
// - push(): move a send's bytes into the buffer that a READY described; pull(): read an
//   announced message out of the peer's memory, where the medium can.
// - on arrival of a frame, frameArrived() says where its payload goes; payloadArrived()
//   once it is there (dataLanded() where the bytes arrive without a frame, as RDMA WRITE
//   WITH IMMEDIATE does).
// - sent() when a send's bytes have left (an EAGER frame written, the last piece pushed);
//   pulled() when a pull finished; peerClosing() / peerClosed(); raisePeerError() with the
//   peer's own error; peerGone() when the peer vanished.
//
// Threading: everything runs on the thread that drives the mesh's progress (the engine
// serializes it). Requests complete (Request::onComplete) on that thread, possibly inside
// post() itself; completion may post again on this pair.
#pragma once

#include <cstdint>
#include <memory>
#include <memory_resource>
#include <string>
#include <unordered_map>
#include <vector>

#include "collx/base/error.h"
#include "collx/transport/link.h"
#include "collx/transport/pair.h"
#include "frame.h"

namespace collx::transport {

// One request in flight on a pair: the protocol's bookkeeping, and the medium's while it
// pushes or pulls the request's bytes.
struct Transfer {
  Request* request = nullptr;
  std::uint32_t id = 0;       // names it in frames: RTS and DONE carry a send's, READY and
                              // DATA a receive's
  std::uint32_t peerId = 0;   // a receive: the sender's id from its RTS (DONE answers it)
  std::uint64_t address = 0;  // a receive: where the sender's bytes are (RTS), for a pull
  std::uint64_t done = 0;     // bytes moved (pushed, pulled, or landed as DATA)
  std::uint32_t pending = 0;  // the medium's: frames of it not yet written
  bool readySent = false;     // a receive: READY went out, the bytes will be pushed
  bool sawRts = false;        // a receive: its RTS arrived
  Transfer* next = nullptr;   // in a queue by key
  std::uint8_t generation = 0;

  std::uint8_t* bytes() const { return static_cast<std::uint8_t*>(request->data); }
  std::uint64_t length() const { return request->length; }
};

class ProtocolPair : public Pair {
 public:
  struct Limits {
    // Both ends of a pair must use the same values for each direction (the media agree on
    // them when they connect).
    std::uint64_t eagerLimit = 0;  // the media set it from COLLX_TCP/SHM_EAGER_LIMIT
    std::uint64_t creditWindow = 4u << 20;
  };

  ProtocolPair(int peer, LinkState& link, const Limits& limits);
  ~ProtocolPair() override;

  void post(Request& request) final;

  // Fails every request in flight with `error`; nothing refers to their buffers after it.
  void failAll(const Error& error) noexcept;
  void drop(const Error& error) noexcept final { failAll(error); }
  // Requests in flight on this pair.
  std::size_t inFlight() const noexcept { return live_; }
  bool busy() const noexcept final { return live_ > 0; }
  std::uint64_t arrivals() const noexcept final { return arrivals_; }
  bool dead() const noexcept { return dead_; }
  // After failAll(): the protocol state as new (credits, queues, transfers) in the link's
  // epoch, and the medium's own (resetMedium()).
  void reset() final;
  // Frames of another epoch read and dropped (for tests).
  std::uint64_t staleFrames() const noexcept final { return stale_; }

  // A transfer id's index part (ids are index + 1 in the low 24 bits, a generation above;
  // indexes are reused): media that keep something per transfer index a vector with it.
  static constexpr std::uint32_t kTransferIndexBits = 24;
  static std::size_t transferIndex(std::uint32_t id) noexcept {
    return id & ((1u << kTransferIndexBits) - 1);
  }

 protected:
  // An EAGER message or an RTS that came before its receive, or a READY before its send.
  struct Unexpected;

  // Where the payload of an arriving frame goes (frameArrived), and what to do once it is
  // there (payloadArrived). `dst` is nullptr and `length` 0 for frames without a payload.
  struct Sink {
    std::uint8_t* dst = nullptr;
    std::uint64_t length = 0;
    Frame frame;
    Transfer* transfer = nullptr;  // a matched EAGER message, or DATA
    Unexpected* unexpected = nullptr;
    // A frame of another epoch, or the rest of one cut short by a failure: its payload (dst
    // nullptr, `length` bytes) is read and dropped, and payloadArrived() does nothing.
    bool stale = false;
  };

  // ---- the medium's hooks ------------------------------------------------------------

  // "tcp", "shm": names the medium in errors.
  virtual const char* medium() const noexcept = 0;
  // Queues `frame` for the peer, with `frame.length` bytes of `payload` after it unless
  // `payload` is null (EAGER and ERROR carry one; the bytes stay valid until the frame is
  // written).
  // Frames reach the peer in the order they were queued. With a transfer (an EAGER send),
  // the medium calls sent(*transfer) once the frame and its payload have left. Non-blocking;
  // throws IoError when the connection broke.
  virtual void sendFrame(const Frame& frame, const std::uint8_t* payload, Transfer* transfer) = 0;
  // Writes what was queued, as far as it can without blocking (called at the end of post()).
  virtual void flushOut() = 0;
  // Whether frames wait to be written (then returned credit rides on them).
  virtual bool outputQueued() const noexcept = 0;
  // Moves the whole of `transfer`'s bytes into the buffer that `ready` announced (a DATA
  // frame per piece whose `xfer` is ready.xfer, or a write into the peer's memory at
  // ready.address with key ready.offset); sent(transfer) once every byte left.
  virtual void push(Transfer& transfer, const Frame& ready) = 0;
  // Whether this medium reads announced messages straight out of the sender's memory; then
  // pull() copies transfer.length() bytes from transfer.address into the receive buffer
  // and calls pulled(), or pullRefused() when reading turns out not to be permitted.
  virtual bool pulls() const noexcept { return false; }
  virtual void pull(Transfer& transfer) { (void)transfer; }
  // The medium's part of an RTS (where the bytes are, for a medium that pulls) and of a
  // READY (where to write them, for a medium that writes the peer's memory).
  virtual void describeSend(const Transfer& transfer, Frame& rts) {
    (void)transfer;
    (void)rts;
  }
  virtual void describeRecv(const Transfer& transfer, Frame& ready) {
    (void)transfer;
    (void)ready;
  }
  // Drops every queued frame, push and pull: failAll() runs next, and nothing may refer to
  // a request's buffer afterwards.
  virtual void dropQueued() noexcept = 0;
  // reset()'s part for the medium: what it must do before the pair carries frames again.
  virtual void resetMedium() {}

  // ---- what media call ---------------------------------------------------------------

  // A frame arrived (its payload, if any, follows): returns where the payload goes. Throws
  // MismatchError, IoError (the peer's own error, a protocol error).
  Sink frameArrived(const Frame& frame);
  // The sink's `length` bytes are in place.
  void payloadArrived(Sink& sink);
  // `bytes` of the receive with id `xfer` landed in its buffer without a frame (a write into
  // this rank's memory); the pieces of one receive may land in any order.
  void dataLanded(std::uint32_t xfer, std::uint64_t bytes);
  // A send's bytes have all left this rank: it completes.
  void sent(Transfer& transfer);
  // A pull finished: DONE goes to the sender, the receive completes.
  void pulled(Transfer& transfer);
  // Reading the sender's memory is refused after all: the bytes are pushed instead.
  void pullRefused(Transfer& transfer);
  // Eager credit to return with a frame being written now (the medium stamps it into the
  // frame's `credit` as it writes it).
  std::uint32_t takeCredit() noexcept;
  // At the end of a medium's progress: a CREDIT frame when much credit is owed and no frame
  // would carry it soon.
  void returnCredit();
  // The peer said it closes (GOODBYE): new receives complete only from what already arrived.
  void peerClosing() noexcept { closing_ = true; }
  bool closing() const noexcept { return closing_; }
  // The peer closed and everything it sent was read: an IoError if anything is still in
  // flight with it.
  void peerClosed();
  // The peer failed and told why: raises its error here, naming the rank its error names
  // (`culprit`; this pair's peer when it names nobody or this rank).
  [[noreturn]] void raisePeerError(ErrorKind kind, std::string text, int culprit);
  [[noreturn]] void peerGone(const std::string& why);
  [[noreturn]] void protocolError(const std::string& why);
  Where where() const { return Where{link_.rank, medium(), peer()}; }
  std::string rankName() const { return "rank " + std::to_string(peer()); }

  LinkState& link_;
  Limits limits_;

 private:
  struct Buffer {
    std::unique_ptr<std::uint8_t[]> bytes;
    std::uint64_t capacity = 0;
  };
  template <typename T>
  struct Queue {
    T* head = nullptr;
    T* tail = nullptr;
  };
  using TransferQueues = std::pmr::unordered_map<MessageKey, Queue<Transfer>, MessageKeyHash>;
  using UnexpectedQueues = std::pmr::unordered_map<MessageKey, Queue<Unexpected>, MessageKeyHash>;

  static std::uint64_t charge(std::uint64_t length) { return length < 64 ? 64 : length; }

  Transfer& allocate(Request& request);
  void release(Transfer& transfer) noexcept;
  Transfer* find(std::uint32_t id, Request::Kind kind);
  void complete(Transfer& transfer);
  // A receive met its message's RTS: pull it, or ask for it (READY).
  void accept(Transfer& transfer, const Frame& rts);
  void sendReady(Transfer& transfer);
  void sendDone(std::uint32_t senderId);
  Unexpected& newUnexpected(const Frame& frame);
  void dropUnexpected(const MessageKey& key, Unexpected& unexpected);
  Buffer takeBuffer(std::uint64_t bytes);
  void giveBuffer(Buffer buffer);

  void checkActive(const Frame& frame);
  void verify(const Transfer& transfer, const Frame& frame);
  [[noreturn]] void mismatch(const std::string& text);

  template <typename T>
  static void pushBack(Queue<T>& queue, T& item);
  template <typename T, typename Map>
  static T* popFront(Map& map, const MessageKey& key);
  template <typename T, typename Map>
  static T* front(Map& map, const MessageKey& key);
  template <typename T, typename Map>
  static void unlink(Map& map, const MessageKey& key, T& item);

  // Transfers by id (index + 1 in the low 24 bits, a generation above), reused.
  std::vector<std::unique_ptr<Transfer>> transfers_;
  std::vector<std::uint32_t> free_;
  std::size_t live_ = 0;
  std::uint64_t arrivals_ = 0;  // frames and landed data from the peer (arrivals())
  std::uint64_t stale_ = 0;     // frames of another epoch (staleFrames())

  // Map nodes come from a pool: no allocation per message once warm.
  std::pmr::unsynchronized_pool_resource pool_;
  TransferQueues posted_;         // receives waiting for their EAGER or RTS (or, READY sent,
                                  // for their RTS)
  TransferQueues awaitingReady_;  // sends announced (RTS) and waiting for READY or DONE
  UnexpectedQueues unexpected_;   // EAGER messages and RTS that came before their receive
  UnexpectedQueues readies_;      // READY that came before their send
  std::pmr::unordered_map<MessageKey, std::uint32_t, MessageKeyHash> rtsOwed_;
  // Messages that came before their receive or send, at most (an EAGER one is bounded by the
  // credit too; an RTS or READY only by this).
  static constexpr std::size_t kMaxUnexpected = std::size_t{1} << 20;
  std::vector<std::unique_ptr<Unexpected>> unexpectedStore_;  // every one ever made
  std::vector<Unexpected*> spareUnexpected_;                  // of those, the unused
  // Early EAGER bytes: buffers kept for reuse, within the credit window (allocating and
  // faulting in a fresh one per message costs more than the copy).
  std::vector<Buffer> spare_;
  std::uint64_t spareBytes_ = 0;
  std::vector<std::uint8_t> errorText_;

  std::uint64_t credits_;              // bytes this rank may still send eagerly
  std::uint64_t creditsToReturn_ = 0;  // the peer's eager bytes consumed, not yet returned
  std::uint64_t peerCredit_;           // bytes the peer may still send eagerly, as this rank
                                       // gave them (returned credit counts once stamped)
  bool closing_ = false;               // the peer said it closes
  bool closed_ = false;                // ... and everything it sent was read
  bool dead_ = false;                  // failAll() ran
};

}  // namespace collx::transport
