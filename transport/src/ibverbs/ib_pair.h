// IbPair: the RDMA verbs medium under the pair protocol (protocol/protocol_pair.h) for one
// peer, over one RC queue pair.
//
// Frames go as SENDs into receive buffers ("slots") that the peer posted ahead: a 16-byte
// header (slots returned, kind), the 64-byte frame, an EAGER message's bytes or an ERROR's
// text. A push is an RDMA WRITE WITH IMMEDIATE straight into the buffer that READY described
// (its address and rkey), the immediate naming the receiver's transfer; it consumes one of
// the peer's slots too, which the receiver's completion then hands back.
//
// Slot credit (so that a sender never meets a receiver without a posted buffer, which would
// be an RNR): each side posts `slots` credited slots plus kSpareSlots for messages that only
// return credit. A frame or a push needs a credited slot; returned slots ride on every SEND's
// header, and a receiver that owes half its slots and has nothing to send says so in a
// credit-only SEND, which needs no credit (at most two of them can be unread at the peer,
// see ib_pair.cc).
//
// Connecting (IbDevice drives it): the higher rank of the two sends HELLO first (job,
// generation, ranks, its eager limit, slots and slot size), retrying with a reset queue pair
// while the lower rank's is not ready yet; the lower rank answers with its own once it has
// the higher rank's. Neither sends anything before, so a reset never loses a message.
//
// Liveness: while requests are in flight and nothing was heard from the peer for a while, a
// zero-length RDMA WRITE goes out: a dead peer's queue pair answers nothing and the write
// ends with a retry error after the queue pair's timeout.
//
// Failure: failAll() moves the queue pair to the error state first (the peer's writes into
// this rank's buffers stop there) and only then forgets the requests and releases their
// registrations.
//
// A new generation (Mesh::reform, the survivors of a failure): the same queue pair goes
// back through RESET to RTS with the same PSNs and fresh receives, and the two HELLOs go
// again, now naming the new generation. Until resume() the pair is parked: it receives (a
// HELLO of the peer's, which it answers) but sends nothing of its own, HELLO included, since
// the peer's queue pair may still be in the old generation, where a request at the old first
// PSN counts as a duplicate (answered, never delivered). The caller resumes once every
// member has re-formed (the members' meeting in the store); frames wait until both HELLOs
// went through.
#pragma once

#include <infiniband/verbs.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "collx/secure/job_secret.h"
#include "ibverbs/ib_port.h"
#include "ibverbs/registrations.h"
#include "ibverbs/verbs_api.h"
#include "protocol/protocol_pair.h"

namespace collx::transport::ibverbs {

// What a rank publishes for one queue pair, and learns of the peer's.
struct QpAddress {
  std::uint32_t qpn = 0;
  std::uint32_t psn = 0;
};

// What this rank's port looks like to peers (published once for all queue pairs).
struct PortAddress {
  std::uint16_t lid = 0;
  ibv_gid gid{};
  bool global = false;  // RoCE / routed: address by GID
  ibv_mtu mtu = IBV_MTU_1024;
};

struct IbPairOptions {
  std::uint64_t eagerLimit = 0;  // this rank's (the pair uses the smaller of both sides')
  int slots = 32;                // credited receive slots
  std::uint32_t maxWrite = 1u << 30;
  std::uint64_t jobHash = 0;
  std::string jobId;
  std::int64_t generation = 0;
  // The job's secret: each side's HELLO carries a proof of it bound to the job, the
  // generation, both ranks and both queue pairs; nullptr: none (the proof is left zero).
  std::shared_ptr<const secure::JobSecret> secret;
  std::chrono::milliseconds probeAfter{500};
};

class IbPair final : public ProtocolPair {
 public:
  // Extra receive slots for credit-only messages.
  static constexpr int kSpareSlots = 2;

  // Creates the queue pair (in INIT); start() allocates and registers the slots. Throws
  // IoError.
  IbPair(int peer, LinkState& link, std::shared_ptr<const VerbsLibrary> library,
         const PortChoice& port, ibv_pd* pd, ibv_cq* cq, Registrations& registrations,
         const IbPairOptions& options);
  ~IbPair() override;

  std::uint32_t qpn() const noexcept { return qp_->qp_num; }
  std::uint32_t psn() const noexcept { return psn_; }

  std::string describe() const override;

  // ---- connecting (IbDevice) ---------------------------------------------------------
  // Posts the receives, moves the queue pair to RTR and RTS towards the peer and, on the
  // higher rank, sends HELLO. Throws IoError.
  void start(const PortAddress& peerPort, const QpAddress& peerQp);
  // Both HELLOs went through: the pair carries frames.
  bool established() const noexcept { return helloIn_ && helloOut_ == HelloState::kDone; }
  // Mesh::reform (the device's part, before the protocol's reset and resetMedium()): the
  // generation the next HELLOs name.
  void reformTo(std::int64_t generation) noexcept { options_.generation = generation; }
  // After a reset: sends this rank's HELLO (the higher rank) now that the peer re-formed.
  // Throws IoError.
  void resume();
  // What connecting waits for, for a TimeoutError ("its HELLO", "the answer to ours").
  std::string waitingFor() const;

  // ---- the device's progress ---------------------------------------------------------
  // One completion of this queue pair. Throws collx::Error (the peer's failure, a protocol
  // error, a failed work request).
  void onCompletion(const ibv_wc& wc);
  // After the device's completions: posts what waits for slots or credit, returns credit,
  // probes a silent peer. Throws like onCompletion.
  void afterProgress(std::chrono::steady_clock::time_point now);
  // Best effort: tells the peer this rank closes (GOODBYE) or fails (ERROR); the device
  // then waits a little for sendsOutstanding() to reach 0 before destroying anything.
  void sendGoodbye() noexcept;
  void sendError(ErrorKind kind, const std::string& text, int culprit) noexcept;
  int sendsOutstanding() const noexcept { return sendsOut_; }
  // While the device closes or fails: accounts a completion of this pair's sends and
  // ignores everything else (nothing completes, nothing throws).
  void drainCompletion(const ibv_wc& wc) noexcept;

 protected:
  const char* medium() const noexcept override { return "ibverbs"; }
  void sendFrame(const Frame& frame, const std::uint8_t* payload, Transfer* transfer) override;
  void flushOut() override;
  bool outputQueued() const noexcept override { return !out_.empty(); }
  void push(Transfer& transfer, const Frame& ready) override;
  void describeRecv(const Transfer& transfer, Frame& ready) override;
  void dropQueued() noexcept override;
  // The queue pair afresh, parked (see the top).
  void resetMedium() override;

 private:
  enum class Kind : std::uint16_t { kFrame = 1, kCredit = 2, kHello = 3 };
  enum class HelloState { kNotSent, kSent, kDone };

  struct Header {
    std::uint32_t slots = 0;  // receive slots reposted since the last header
    Kind kind = Kind::kFrame;
    std::uint16_t magic = 0;
    std::uint64_t reserved = 0;
  };
  static_assert(sizeof(Header) == 16);

  // A SEND or a WRITE waiting for a slot (or credit) of the peer.
  struct Out {
    bool write = false;
    Frame frame;                            // a frame: what to send
    const std::uint8_t* payload = nullptr;  // its payload (length: frame's, or error text)
    std::uint64_t payloadLength = 0;
    Transfer* transfer = nullptr;  // an EAGER send (sent once copied), or a push
    // a WRITE: where and how much
    std::uint64_t offset = 0;
    std::uint64_t length = 0;
    std::uint64_t remote = 0;
    std::uint32_t rkey = 0;
    std::uint32_t imm = 0;
    std::uint32_t push = 0;  // index in pushes_
  };

  // A push in flight: its registration and pieces not yet completed.
  struct Push {
    Transfer* transfer = nullptr;
    Registrations::Handle handle;
    std::uint32_t pieces = 0;
  };
  // A receive whose READY went out: its registration and the bytes landed so far.
  struct Landing {
    std::uint32_t id = 0;  // the receive's transfer id (0: free)
    Registrations::Handle handle;
    std::uint64_t length = 0;
    std::uint64_t landed = 0;
  };

  std::uint8_t* recvSlot(std::size_t i) const { return recvBytes_.get() + i * slotBytes_; }
  std::uint8_t* sendSlot(std::size_t i) const { return sendBytes_.get() + i * slotBytes_; }
  std::uint64_t wrId(std::uint64_t tag, std::uint32_t value) const;
  void allocateSlots();
  void postRecv(std::size_t slot);
  // Posts a SEND of `bytes` from send slot `slot`; throws IoError.
  // (inline when it fits the queue pair's max_inline_data).
  void postSend(std::size_t slot, std::uint32_t bytes);
  bool postOne(Out& out);
  // Takes a free send slot and writes the header (returning the slots owed) into it.
  std::uint8_t* takeSlot(Kind kind, std::uint32_t* slot);
  void sendHello();
  void sendCreditOnly();
  // RESET, INIT, receives posted, RTR, RTS (start()); everything sent or owed before is
  // forgotten.
  void resetQp();
  void moveTo(ibv_qp_state state);
  void onReceive(const ibv_wc& wc);
  void onHello(const std::uint8_t* bytes, std::uint32_t length);
  void failedCompletion(const ibv_wc& wc);
  [[noreturn]] void fail(const std::string& what);
  void heard(std::chrono::steady_clock::time_point now) noexcept { lastHeard_ = now; }

  std::shared_ptr<const VerbsLibrary> library_;
  const VerbsApi& api_;
  PortChoice port_;
  ibv_cq* cq_;
  ibv_pd* pd_ = nullptr;
  Registrations& registrations_;
  IbPairOptions options_;
  QueuePair qp_;
  std::uint32_t psn_ = 0;
  std::uint32_t maxInline_ = 0;
  PortAddress peerPort_;
  QpAddress peerQp_;
  std::uint8_t epoch_ = 0;  // wr_ids of an earlier reset are ignored

  // Slots: (slots + kSpareSlots) to receive into, as many to send from.
  std::size_t slotBytes_ = 0;
  std::size_t slotCount_ = 0;
  std::unique_ptr<std::uint8_t[]> recvBytes_;
  std::unique_ptr<std::uint8_t[]> sendBytes_;
  MemoryRegion recvMr_;
  MemoryRegion sendMr_;
  std::vector<std::uint32_t> freeSendSlots_;

  // Credit: the peer's credited slots this rank may fill, its spare slots (credit-only), and
  // slots of this rank reposted but not yet announced.
  std::uint64_t peerSlotPayload_ = 0;
  int credit_ = 0;
  int owed_ = 0;
  int sendsOut_ = 0;  // SENDs and WRITEs posted and not completed

  std::deque<Out> out_;
  std::vector<Push> pushes_;
  std::vector<std::uint32_t> freePushes_;
  // By the index part of the receive's transfer id (transfers are reused, so this stays
  // small and allocates nothing once warm).
  std::vector<Landing> landings_;
  static std::size_t landingIndex(std::uint32_t xfer) { return transferIndex(xfer); }

  bool higher_ = false;  // this rank sends HELLO first
  bool helloIn_ = false;
  HelloState helloOut_ = HelloState::kNotSent;
  std::uint32_t helloSlot_ = 0;
  bool posting_ = false;  // inside flushOut(): completions may post again
  bool failed_ = false;
  bool goodbyeSent_ = false;
  bool peerGone_ = false;  // the peer said goodbye and its queue pair is gone
  bool parked_ = false;    // reset for a new generation, not resumed yet: sends nothing
  std::chrono::steady_clock::time_point lastHeard_;
  bool probing_ = false;
};

}  // namespace collx::transport::ibverbs
