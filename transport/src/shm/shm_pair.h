// ShmPair: the shared-memory transport's connection to one peer on this host.
//
// Each direction is a single-producer single-consumer ring in the receiver's arena
// (arena.h): 64-byte records, each followed by its payload padded to 64 bytes, published by
// advancing the monotonic `tail` (release) and consumed by advancing `head`.
//
//   EAGER  a message of at most eagerLimit bytes, payload in the record. Sent while the
//          receiver has credit for it (bytes it may have to hold before a receive is posted;
//          the receiver returns credit by advancing `creditReturned`).
//   RTS    any other message: the sender's buffer address and length. The receiver copies it
//          straight into the receive buffer once posted (single copy: process_vm_readv, or
//          memcpy when the peer is a thread of this process) and answers DONE.
//   READY  the receiver cannot read the sender's memory (CMA refused, or COLLX_SHM_CMA=0):
//          "send the bytes through the ring" (reply = the receiver's transfer id)
//   DATA   a piece of such a message (offset, length), copied into the receive buffer
//   DONE   the receiver copied an RTS message: the send completes
//
// Failures and closing travel in the arena header, not in the ring (which may be full): a
// rank that fails writes its error there and rings every peer; a peer that sees it raises
// that error naming the same culprit. A rank that closes its context sets "closed"; a peer
// that still waits for it then fails. A peer process that dies (pidfd readable) is an
// IoError naming it, after its last records were read.
//
// Every arrival is checked like tcp's: a fingerprint or length that differs, or a collective
// sequence number this rank runs as another collective, is a MismatchError here and, through
// the arena header, on the peer too.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "arena.h"
#include "collx/base/error.h"
#include "collx/transport/mesh.h"
#include "collx/transport/pair.h"

namespace collx::transport::shm {

enum class RecordType : std::uint8_t {
  kEager = 1,
  kRts = 2,
  kReady = 3,
  kData = 4,
  kDone = 5,
};

struct Record {
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
  std::uint64_t length = 0;   // message length; DATA: this piece's length
  std::uint64_t offset = 0;   // DATA: where the piece goes
  std::uint64_t address = 0;  // RTS: the sender's buffer
  std::uint32_t xfer = 0;     // the sender's transfer id (RTS, READY, DONE); DATA: receiver's
  std::uint32_t reply = 0;    // READY: the receiver's transfer id, for DATA

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
static_assert(sizeof(Record) == 64, "a record header is one cache line");

struct ShmPairOptions {
  std::uint64_t eagerLimit = 256 * 1024;
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

class ShmPair final : public Pair {
 public:
  ShmPair(LinkState& link, const ShmPairOptions& options, const Mapping& self,
          const Layout& selfLayout, PeerView peer, int bellSocket);
  ~ShmPair() override;

  void post(Request& request) override;
  std::string describe() const override;

  // Moves what can move now (reads the inbound ring within `budget` bytes, copies pulls,
  // writes queued records). Throws collx::Error (see the class comment).
  bool progress(std::uint64_t& budget);
  // Whether progress() would find something to do now (checked after `sleeping` was set).
  bool wouldWake();
  // The peer's process ended: raises the error it left, or that it died, unless it closed
  // its context with nothing left in flight with this rank.
  void peerExited();
  void failAll(const Error& error) noexcept;
  // Rings the peer's doorbell (it is told to look at this rank's header).
  void ring() noexcept;

  pid_t peerPid() const noexcept { return peer_.pid; }
  bool samePid() const noexcept { return peer_.samePid; }
  bool exited() const noexcept { return exited_; }

 private:
  struct Out {
    Record record;
    const std::uint8_t* payload = nullptr;
    std::uint64_t payloadLength = 0;
    Request* request = nullptr;  // completes once the record is in the ring
  };
  struct Stream {  // a message going out as DATA pieces
    Request* request;
    std::uint32_t xfer;  // the receiver's id
    std::uint64_t offset;
  };
  struct Pull {  // a message copied straight from the peer's memory
    Request* request;
    std::uint64_t address;
    std::uint32_t xfer;  // the sender's id, for DONE
  };
  // Holds an early EAGER message's bytes; kept for reuse (within the credit window), since
  // allocating and faulting in a fresh buffer per message would cost more than the copy.
  struct Buffer {
    std::unique_ptr<std::uint8_t[]> bytes;
    std::uint64_t capacity = 0;
  };
  struct Unexpected {
    Record record;
    Buffer payload;  // EAGER only
  };
  using KeyMap = std::unordered_map<MessageKey, std::deque<Request*>, MessageKeyHash>;

  static std::uint64_t charge(std::uint64_t length) { return length < 64 ? 64 : length; }
  static std::uint64_t padded(std::uint64_t length) { return (length + 63) & ~std::uint64_t{63}; }

  bool receive(std::uint64_t& budget);
  void onRecord(const Record& record, std::uint64_t payloadAt);
  bool flush();
  bool room(std::uint64_t bytes);
  void writeRecord(const Record& record, const std::uint8_t* payload, std::uint64_t length);
  void notifyPeer();
  bool pumpPulls(std::uint64_t& budget);
  void startPull(Request& request, const Record& rts);
  void askForData(Request& request, const Record& rts);
  void queueControl(const Record& record, Request* request = nullptr,
                    const std::uint8_t* payload = nullptr, std::uint64_t length = 0);
  void returnCredit(std::uint64_t bytes);
  Buffer takeBuffer(std::uint64_t bytes);
  void giveBuffer(Buffer buffer);
  void complete(Request& request);
  void checkPeerState(std::uint32_t state);
  [[noreturn]] void raisePeerFailure();

  // The oldest receive posted for `key`, taken off the list (nullptr: none).
  Request* takePosted(const MessageKey& key);
  void checkActive(const Record& record);
  void verify(const Request& request, const Record& record);
  [[noreturn]] void mismatch(const std::string& text);
  [[noreturn]] void peerGone(const std::string& why);
  [[noreturn]] void protocolError(const std::string& why);
  Where where() const { return Where{link_.rank, "shm", peer()}; }

  LinkState& link_;
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
  std::uint64_t creditReturned_ = 0;
  // Outbound: the peer's arena, the ring this rank writes.
  RingControl* out_;
  std::uint8_t* outData_;
  std::uint64_t outBytes_;
  std::uint64_t outTail_ = 0;
  std::uint64_t outHeadSeen_ = 0;
  std::uint64_t eagerCharged_ = 0;
  std::uint64_t creditSeen_ = 0;
  std::uint64_t minPiece_ = 0;  // a smaller DATA piece waits for more room
  bool wrote_ = false;          // records written since the peer was last notified
  bool blocked_ = false;        // output waits for room in the peer's ring

  std::uint32_t nextXfer_ = 1;
  std::unordered_set<Request*> live_;
  KeyMap posted_;  // receives waiting for their EAGER or RTS
  std::unordered_map<MessageKey, std::deque<Unexpected>, MessageKeyHash> unexpected_;
  std::unordered_map<std::uint32_t, Request*> sends_;  // RTS sent, by this rank's id
  std::unordered_map<std::uint32_t, Request*> recvs_;  // READY sent, by this rank's id
  std::deque<Out> control_;
  std::deque<Stream> data_;
  std::deque<Pull> pulls_;
  std::vector<Buffer> spare_;  // at most creditWindow bytes in all
  std::uint64_t spareBytes_ = 0;

  bool peerClosed_ = false;  // the peer closed its context (and we read all it wrote)
  bool exited_ = false;      // the peer's process ended (after closing)
  bool dead_ = false;        // failAll() ran
};

}  // namespace collx::transport::shm
