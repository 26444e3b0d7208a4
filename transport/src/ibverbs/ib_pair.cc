#include "ibverbs/ib_pair.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>

#include "collx/base/log.h"

namespace collx::transport::ibverbs {

namespace {

constexpr std::uint16_t kHeaderMagic = 0x4942;     // "IB"
constexpr std::uint32_t kHelloMagic = 0x434c5849;  // "CLXI"
constexpr std::uint32_t kHelloVersion = 2;         // 2: with the proof of the job's secret
// A slot holds at least this much payload: an ERROR's text, a HELLO.
constexpr std::uint64_t kMinSlotPayload = 1024;
constexpr std::size_t kHeaderBytes = 16;
constexpr std::size_t kFrameOffset = kHeaderBytes;
constexpr std::size_t kPayloadOffset = kHeaderBytes + sizeof(Frame);
constexpr std::uint32_t kInlineBytes = 128;

// wr_id: tag (8 bits), the pair's epoch (8 bits), a value (32 bits).
constexpr std::uint64_t kTagRecv = 1;
constexpr std::uint64_t kTagSend = 2;
constexpr std::uint64_t kTagPush = 3;
constexpr std::uint64_t kTagProbe = 4;

std::uint64_t tagOf(std::uint64_t wrId) { return wrId >> 56; }
std::uint8_t epochOf(std::uint64_t wrId) { return static_cast<std::uint8_t>(wrId >> 48); }
std::uint32_t valueOf(std::uint64_t wrId) { return static_cast<std::uint32_t>(wrId); }

// Queue-pair attributes (the kernel's rules for RC: ib_modify_qp_is_ok).
constexpr std::uint8_t kTimeout = 14;      // 4.096 us * 2^14 = 67 ms per try
constexpr std::uint8_t kRetryCount = 7;    // a silent peer: an error after about 0.5 s
constexpr std::uint8_t kRnrRetry = 7;      // credit prevents RNR; 7 retries forever
constexpr std::uint8_t kMinRnrTimer = 12;  // 0.64 ms

struct Hello {
  std::uint32_t magic = kHelloMagic;
  std::uint32_t version = kHelloVersion;
  std::uint64_t job = 0;
  std::int64_t generation = 0;
  std::int32_t from = 0;
  std::int32_t to = 0;
  std::uint32_t slots = 0;
  std::uint32_t reserved = 0;
  std::uint64_t eagerLimit = 0;
  std::uint64_t slotPayload = 0;
  // HMAC(pair key, "ib hello" | job id | generation | from | to | from's QPN | to's QPN):
  // the queue pairs are new for every connection, so a proof is never good twice.
  secure::Tag proof{};
};

secure::Tag helloProof(const secure::JobSecret& secret, const std::string& jobId,
                       std::int64_t generation, std::int32_t from, std::int32_t to,
                       std::uint32_t fromQpn, std::uint32_t toQpn) {
  auto bytes = [](const auto& v) {
    return std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(&v), sizeof v);
  };
  return secret.mac(secure::Purpose::kPair, {"ib hello", jobId, bytes(generation), bytes(from),
                                             bytes(to), bytes(fromQpn), bytes(toQpn)});
}

std::uint32_t randomPsn() {
  static thread_local std::mt19937 engine{std::random_device{}()};
  return engine() & 0xffffff;
}

const char* opName(const ibv_wc& wc) {
  switch (tagOf(wc.wr_id)) {
    case kTagRecv:
      return "receive";
    case kTagSend:
      return "SEND";
    case kTagPush:
      return "RDMA WRITE WITH IMMEDIATE";
    case kTagProbe:
      return "RDMA WRITE (liveness probe)";
    default:
      return "work request";
  }
}

}  // namespace

IbPair::IbPair(int peer, LinkState& link, std::shared_ptr<const VerbsLibrary> library,
               const PortChoice& port, ibv_pd* pd, ibv_cq* cq, Registrations& registrations,
               const IbPairOptions& options)
    : ProtocolPair(peer, link, Limits{.eagerLimit = options.eagerLimit}),
      library_(std::move(library)),
      api_(library_->api()),
      port_(port),
      cq_(cq),
      registrations_(registrations),
      options_(options),
      psn_(randomPsn()),
      higher_(link.rank > peer) {
  const std::uint64_t payload = std::max<std::uint64_t>(options_.eagerLimit, kMinSlotPayload);
  slotBytes_ = (kPayloadOffset + payload + 63) / 64 * 64;
  slotCount_ = static_cast<std::size_t>(options_.slots) + kSpareSlots;

  ibv_qp_init_attr init{};
  init.send_cq = cq;
  init.recv_cq = cq;
  init.qp_type = IBV_QPT_RC;
  init.sq_sig_all = 0;
  init.cap.max_send_wr = static_cast<std::uint32_t>(2 * slotCount_ + 4);
  init.cap.max_recv_wr = static_cast<std::uint32_t>(slotCount_);
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  // Frames without payload (80 bytes with the header) go inline where the device allows:
  // the NIC takes them with the work request instead of reading the slot afterwards.
  init.cap.max_inline_data = kInlineBytes;
  ibv_qp* raw = api_.createQp(pd, &init);
  if (raw == nullptr) {
    init.cap.max_inline_data = 0;  // a device without inline sends of that size
    raw = api_.createQp(pd, &init);
  }
  if (raw == nullptr) fail(std::string("ibv_create_qp failed: ") + std::strerror(errno));
  maxInline_ = init.cap.max_inline_data;
  qp_ = QueuePair(library_, raw, api_.destroyQp, "queue pair");
  moveTo(IBV_QPS_INIT);

  pd_ = pd;
}

IbPair::~IbPair() {
  for (Push& p : pushes_) registrations_.release(p.handle);
  for (Landing& landing : landings_) registrations_.release(landing.handle);
  qp_ = QueuePair();  // before the slots' registrations and memory
}

std::string IbPair::describe() const {
  return "ibverbs " + port_.device + ":" + std::to_string(port_.port) + " qp " +
         std::to_string(qp_ ? qp_->qp_num : 0) + " -> qp " + std::to_string(peerQp_.qpn);
}

std::uint64_t IbPair::wrId(std::uint64_t tag, std::uint32_t value) const {
  return tag << 56 | std::uint64_t{epoch_} << 48 | value;
}

void IbPair::fail(const std::string& what) {
  throw IoError(where(), "ibverbs, " + rankName() + ": " + what);
}

// ---- the queue pair's states --------------------------------------------------------------

void IbPair::moveTo(ibv_qp_state state) {
  ibv_qp_attr attr{};
  attr.qp_state = state;
  int mask = IBV_QP_STATE;
  switch (state) {
    case IBV_QPS_INIT:
      attr.pkey_index = 0;
      attr.port_num = port_.port;
      attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
      mask |= IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
      break;
    case IBV_QPS_RTR:
      attr.path_mtu = std::min(port_.activeMtu, peerPort_.mtu);
      attr.dest_qp_num = peerQp_.qpn;
      attr.rq_psn = peerQp_.psn;
      attr.max_dest_rd_atomic = 1;
      attr.min_rnr_timer = kMinRnrTimer;
      attr.ah_attr.port_num = port_.port;
      attr.ah_attr.dlid = peerPort_.lid;
      if (peerPort_.global) {
        attr.ah_attr.is_global = 1;
        attr.ah_attr.grh.dgid = peerPort_.gid;
        attr.ah_attr.grh.sgid_index = static_cast<std::uint8_t>(std::max(port_.gidIndex, 0));
        attr.ah_attr.grh.hop_limit = 64;
      }
      mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
              IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
      break;
    case IBV_QPS_RTS:
      attr.timeout = kTimeout;
      attr.retry_cnt = kRetryCount;
      attr.rnr_retry = kRnrRetry;
      attr.sq_psn = psn_;
      attr.max_rd_atomic = 1;
      mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
              IBV_QP_MAX_QP_RD_ATOMIC;
      break;
    default:
      break;
  }
  if (int rc = api_.modifyQp(qp_.get(), &attr, mask); rc != 0) {
    static const char* const kNames[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
    const int at = static_cast<int>(state);
    fail(std::string("ibv_modify_qp to ") + (at >= 0 && at <= 6 ? kNames[at] : "?") +
         " failed: " + std::strerror(rc));
  }
}

void IbPair::postRecv(std::size_t slot) {
  ibv_sge sge{};
  sge.addr = reinterpret_cast<std::uintptr_t>(recvSlot(slot));
  sge.length = static_cast<std::uint32_t>(slotBytes_);
  sge.lkey = recvMr_->lkey;
  ibv_recv_wr wr{};
  wr.wr_id = wrId(kTagRecv, static_cast<std::uint32_t>(slot));
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  if (int rc = VerbsApi::postRecv(qp_.get(), &wr, &bad); rc != 0) {
    fail(std::string("ibv_post_recv failed: ") + std::strerror(rc));
  }
}

void IbPair::allocateSlots() {
  // Only for peers this device connects (the slots cost 2 x (slots + 2) x slotBytes_).
  recvBytes_ = std::make_unique<std::uint8_t[]>(slotCount_ * slotBytes_);
  sendBytes_ = std::make_unique<std::uint8_t[]>(slotCount_ * slotBytes_);
  for (auto* bytes : {recvBytes_.get(), sendBytes_.get()}) {
    ibv_mr* mr = api_.regMr(pd_, bytes, slotCount_ * slotBytes_, IBV_ACCESS_LOCAL_WRITE);
    if (mr == nullptr) fail(std::string("ibv_reg_mr of the slots failed: ") + std::strerror(errno));
    (bytes == recvBytes_.get() ? recvMr_ : sendMr_) =
        MemoryRegion(library_, mr, api_.deregMr, "memory region");
  }
  for (std::size_t i = slotCount_; i-- > 0;)
    freeSendSlots_.push_back(static_cast<std::uint32_t>(i));
  credit_ = options_.slots;
}

void IbPair::start(const PortAddress& peerPort, const QpAddress& peerQp) {
  peerPort_ = peerPort;
  peerQp_ = peerQp;
  if (!recvBytes_) allocateSlots();
  for (std::size_t i = 0; i < slotCount_; ++i) postRecv(i);
  moveTo(IBV_QPS_RTR);
  moveTo(IBV_QPS_RTS);
  lastHeard_ = std::chrono::steady_clock::now();
  if (higher_ && !parked_) sendHello();
}

void IbPair::resetQp() {
  // Start again with the same PSNs: while connecting, only before anything but our HELLO was
  // sent or received (see ib_pair.h: the peer's queue pair was not ready for it); for a new
  // generation, after a failure, when nothing of the old one matters any more.
  ++epoch_;  // the flushed work of the old one is ignored
  moveTo(IBV_QPS_RESET);
  moveTo(IBV_QPS_INIT);
  freeSendSlots_.clear();
  for (std::size_t i = slotCount_; i-- > 0;)
    freeSendSlots_.push_back(static_cast<std::uint32_t>(i));
  sendsOut_ = 0;
  credit_ = options_.slots;
  owed_ = 0;
  helloOut_ = HelloState::kNotSent;
  start(peerPort_, peerQp_);
}

void IbPair::resetMedium() {
  // (failAll() ran: the queue pair is in the error state, the requests and their
  // registrations are gone.)
  failed_ = false;
  goodbyeSent_ = false;
  peerGone_ = false;
  probing_ = false;
  helloIn_ = false;
  parked_ = true;
  limits_.eagerLimit = options_.eagerLimit;
  resetQp();
}

void IbPair::resume() {
  if (!parked_) return;
  parked_ = false;
  lastHeard_ = std::chrono::steady_clock::now();
  if (higher_ && helloOut_ == HelloState::kNotSent && !failed_ && !dead()) sendHello();
}

std::string IbPair::waitingFor() const {
  if (!helloIn_) return higher_ ? "the answer to its HELLO" : "its HELLO";
  return "the acknowledgement of this rank's HELLO";
}

// ---- sending ------------------------------------------------------------------------------

void IbPair::postSend(std::size_t slot, std::uint32_t bytes) {
  ibv_sge sge{};
  sge.addr = reinterpret_cast<std::uintptr_t>(sendSlot(slot));
  sge.length = bytes;
  sge.lkey = sendMr_->lkey;
  ibv_send_wr wr{};
  wr.wr_id = wrId(kTagSend, static_cast<std::uint32_t>(slot));
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED | (bytes <= maxInline_ ? IBV_SEND_INLINE : 0);
  ibv_send_wr* bad = nullptr;
  if (int rc = VerbsApi::postSend(qp_.get(), &wr, &bad); rc != 0) {
    fail(std::string("ibv_post_send (SEND) failed: ") + std::strerror(rc));
  }
  ++sendsOut_;
}

void IbPair::sendHello() {
  std::uint32_t slot = 0;
  std::uint8_t* at = takeSlot(Kind::kHello, &slot);
  helloSlot_ = slot;
  Hello hello;
  hello.job = options_.jobHash;
  hello.generation = options_.generation;
  hello.from = link_.rank;
  hello.to = peer();
  hello.slots = static_cast<std::uint32_t>(options_.slots);
  hello.eagerLimit = options_.eagerLimit;
  hello.slotPayload = slotBytes_ - kPayloadOffset;
  if (options_.secret) {
    hello.proof = helloProof(*options_.secret, options_.jobId, hello.generation, hello.from,
                             hello.to, qp_->qp_num, peerQp_.qpn);
  }
  std::memcpy(at + kHeaderBytes, &hello, sizeof(hello));
  --credit_;
  postSend(slot, kHeaderBytes + sizeof(hello));
  helloOut_ = HelloState::kSent;
}

std::uint8_t* IbPair::takeSlot(Kind kind, std::uint32_t* slot) {
  *slot = freeSendSlots_.back();
  freeSendSlots_.pop_back();
  Header header;
  header.slots = static_cast<std::uint32_t>(owed_);  // the slots reposted so far go back
  header.kind = kind;
  header.magic = kHeaderMagic;
  owed_ = 0;
  std::uint8_t* at = sendSlot(*slot);
  std::memcpy(at, &header, sizeof(header));
  return at;
}

void IbPair::onHello(const std::uint8_t* bytes, std::uint32_t length) {
  Hello hello;
  if (length < kHeaderBytes + sizeof(hello))
    fail("a HELLO of " + std::to_string(length) + " bytes");
  std::memcpy(&hello, bytes + kHeaderBytes, sizeof(hello));
  if (hello.magic != kHelloMagic || hello.version != kHelloVersion) {
    fail("its HELLO is not collx's (version " + std::to_string(hello.version) + ")");
  }
  if (hello.job != options_.jobHash || hello.generation != options_.generation) {
    fail("its queue pair belongs to another job or generation");
  }
  if (hello.from != peer() || hello.to != link_.rank) {
    fail("a HELLO from rank " + std::to_string(hello.from) + " to rank " +
         std::to_string(hello.to));
  }
  if (options_.secret &&
      !secure::sameBytes(hello.proof, helloProof(*options_.secret, options_.jobId, hello.generation,
                                                 hello.from, hello.to, peerQp_.qpn, qp_->qp_num))) {
    fail(
        "its HELLO does not prove the job's secret (the ranks were given different secrets, "
        "or something else wrote to this queue pair)");
  }
  if (hello.slots != static_cast<std::uint32_t>(options_.slots)) {
    fail("it posts " + std::to_string(hello.slots) + " receive slots, this rank " +
         std::to_string(options_.slots) + " (collx versions differ)");
  }
  peerSlotPayload_ = hello.slotPayload;
  limits_.eagerLimit = std::min(options_.eagerLimit, hello.eagerLimit);
  helloIn_ = true;
  if (!higher_) sendHello();
}

void IbPair::sendFrame(const Frame& frame, const std::uint8_t* payload, Transfer* transfer) {
  Out out;
  out.frame = frame;
  out.payload = payload;
  out.payloadLength = payload != nullptr ? frame.length : 0;
  out.transfer = transfer;
  if (transfer != nullptr) transfer->pending = 1;
  out_.push_back(out);
}

bool IbPair::postOne(Out& out) {
  if (credit_ < 1 || sendsOut_ >= static_cast<int>(2 * slotCount_)) return false;
  if (out.write) {
    Push& p = pushes_[out.push];
    ibv_sge sge{};
    sge.addr = reinterpret_cast<std::uintptr_t>(out.transfer->bytes() + out.offset);
    sge.length = static_cast<std::uint32_t>(out.length);
    sge.lkey = p.handle.lkey();
    ibv_send_wr wr{};
    wr.wr_id = wrId(kTagPush, out.push);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm_data = htonl(out.imm);
    wr.wr.rdma.remote_addr = out.remote;
    wr.wr.rdma.rkey = out.rkey;
    ibv_send_wr* bad = nullptr;
    if (int rc = VerbsApi::postSend(qp_.get(), &wr, &bad); rc != 0) {
      fail(std::string("ibv_post_send (RDMA WRITE WITH IMMEDIATE) failed: ") + std::strerror(rc));
    }
    ++sendsOut_;
    --credit_;
    return true;
  }
  if (freeSendSlots_.empty()) return false;
  std::uint32_t slot = 0;
  std::uint8_t* at = takeSlot(Kind::kFrame, &slot);
  out.frame.credit = takeCredit();
  out.frame.epoch = link_.epoch;  // (stamped as it leaves, as every medium does)
  std::memcpy(at + kFrameOffset, &out.frame, sizeof(Frame));
  if (out.payloadLength > 0) std::memcpy(at + kPayloadOffset, out.payload, out.payloadLength);
  --credit_;
  postSend(slot, static_cast<std::uint32_t>(kPayloadOffset + out.payloadLength));
  return true;
}

void IbPair::flushOut() {
  // (Frames wait for both HELLOs: after a reset for a new generation, a frame before the
  // HELLO would find the peer not knowing the generation yet.)
  if (posting_ || failed_ || !established()) return;
  posting_ = true;
  struct Reset {
    bool& flag;
    ~Reset() { flag = false; }
  } reset{posting_};
  while (!out_.empty() && !failed_) {
    if (!postOne(out_.front())) break;
    const Out done = out_.front();
    out_.pop_front();
    // An EAGER send's bytes are in the slot: the caller's buffer is free. Completion may
    // post again (queued behind this loop).
    if (done.transfer != nullptr && !done.write) sent(*done.transfer);
  }
}

void IbPair::sendCreditOnly() {
  if (freeSendSlots_.empty() || sendsOut_ >= static_cast<int>(2 * slotCount_)) return;
  std::uint32_t slot = 0;
  takeSlot(Kind::kCredit, &slot);
  postSend(slot, kHeaderBytes);  // a spare slot of the peer's: no credit
}

void IbPair::push(Transfer& transfer, const Frame& ready) {
  std::string why;
  Push p;
  p.transfer = &transfer;
  p.handle = registrations_.acquire(transfer.bytes(), transfer.length(), &why);
  if (!p.handle)
    fail(why + " (the buffer of a send of " + std::to_string(transfer.length()) + " bytes)");
  const std::uint64_t length = transfer.length();
  const std::uint64_t piece = options_.maxWrite;
  p.pieces = static_cast<std::uint32_t>((length + piece - 1) / piece);
  std::uint32_t index;
  if (!freePushes_.empty()) {
    index = freePushes_.back();
    freePushes_.pop_back();
    pushes_[index] = p;
  } else {
    index = static_cast<std::uint32_t>(pushes_.size());
    pushes_.push_back(p);
  }
  transfer.pending = p.pieces;
  for (std::uint64_t offset = 0; offset < length; offset += piece) {
    Out out;
    out.write = true;
    out.transfer = &transfer;
    out.offset = offset;
    out.length = std::min(piece, length - offset);
    out.remote = ready.address + offset;
    out.rkey = static_cast<std::uint32_t>(ready.offset);
    out.imm = ready.xfer;
    out.push = index;
    out_.push_back(out);
  }
}

void IbPair::describeRecv(const Transfer& transfer, Frame& ready) {
  std::string why;
  Landing landing;
  landing.length = transfer.length();
  landing.handle = registrations_.acquire(transfer.bytes(), transfer.length(), &why);
  if (!landing.handle) {
    fail(why + " (the buffer of a receive of " + std::to_string(transfer.length()) + " bytes)");
  }
  ready.address = reinterpret_cast<std::uintptr_t>(transfer.bytes());
  ready.offset = landing.handle.rkey();
  landing.id = transfer.id;
  const std::size_t at = landingIndex(transfer.id);
  if (at >= landings_.size()) landings_.resize(at + 1);
  landings_[at] = landing;
}

// ---- completions --------------------------------------------------------------------------

void IbPair::onCompletion(const ibv_wc& wc) {
  if (epochOf(wc.wr_id) != epoch_ || failed_) return;
  if (wc.status != IBV_WC_SUCCESS) return failedCompletion(wc);
  heard(std::chrono::steady_clock::now());
  switch (tagOf(wc.wr_id)) {
    case kTagRecv:
      onReceive(wc);
      return;
    case kTagSend:
      freeSendSlots_.push_back(valueOf(wc.wr_id));
      --sendsOut_;
      if (helloOut_ == HelloState::kSent && valueOf(wc.wr_id) == helloSlot_) {
        helloOut_ = HelloState::kDone;  // acknowledged: the peer has it
      }
      return;
    case kTagPush: {
      --sendsOut_;
      Push& p = pushes_[valueOf(wc.wr_id)];
      if (--p.pieces > 0) return;
      Transfer* transfer = p.transfer;
      registrations_.release(p.handle);
      p.transfer = nullptr;
      freePushes_.push_back(valueOf(wc.wr_id));
      sent(*transfer);
      return;
    }
    case kTagProbe:
      --sendsOut_;
      probing_ = false;
      return;
    default:  // not a tag this pair posts: the failure below
      break;
  }
  fail("a completion with an unknown wr_id " + std::to_string(wc.wr_id));
}

void IbPair::drainCompletion(const ibv_wc& wc) noexcept {
  if (epochOf(wc.wr_id) != epoch_) return;
  switch (tagOf(wc.wr_id)) {
    case kTagSend:
      freeSendSlots_.push_back(valueOf(wc.wr_id));
      --sendsOut_;
      return;
    case kTagPush:
    case kTagProbe:
      --sendsOut_;
      return;
    default:
      return;
  }
}

void IbPair::failedCompletion(const ibv_wc& wc) {
  const bool retried = wc.status == IBV_WC_RETRY_EXC_ERR || wc.status == IBV_WC_RNR_RETRY_EXC_ERR;
  if (retried && higher_ && !helloIn_ && tagOf(wc.wr_id) == kTagSend) {
    // Our HELLO found no queue pair ready for it: the peer is still setting up (or gone; the
    // connect deadline decides).
    COLLX_DEBUG(kIbverbs, "rank {}: HELLO to rank {} not answered yet; again", link_.rank, peer());
    resetQp();
    return;
  }
  if (closing() && (retried || wc.status == IBV_WC_WR_FLUSH_ERR)) {
    // The peer said goodbye and its queue pair is gone: no failure unless work was left.
    peerGone_ = true;
    peerClosed();
    return;
  }
  std::string text = std::string(opName(wc)) + " failed: " + api_.wcStatusStr(wc.status) +
                     " (status " + std::to_string(static_cast<int>(wc.status)) + ", vendor error " +
                     std::to_string(wc.vendor_err) + ")";
  if (wc.status == IBV_WC_WR_FLUSH_ERR) {
    // Nothing failed here first: the queue pair went to the error state under this work (a
    // protection or access error the peer's side raised).
    text += "; the queue pair to " + rankName() + " went to the error state";
  } else if (retried) {
    text += "; " + rankName() +
            " died or was killed, or its host or port is down (its queue pair "
            "does not answer)";
  }
  fail(text);
}

void IbPair::onReceive(const ibv_wc& wc) {
  const std::size_t slot = valueOf(wc.wr_id);
  if (slot >= slotCount_) fail("a receive completion for slot " + std::to_string(slot));
  if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
    const std::uint32_t xfer = ntohl(wc.imm_data);
    postRecv(slot);
    ++owed_;
    const std::size_t at = landingIndex(xfer);
    if (at >= landings_.size() || landings_[at].id != xfer || xfer == 0) {
      protocolError(std::to_string(wc.byte_len) + " bytes written for unknown transfer " +
                    std::to_string(xfer));
    }
    Landing& landing = landings_[at];
    landing.landed += wc.byte_len;
    if (landing.landed >= landing.length) {
      registrations_.release(landing.handle);
      landing = Landing{};
    }
    dataLanded(xfer, wc.byte_len);
    return;
  }
  const std::uint8_t* bytes = recvSlot(slot);
  if (wc.byte_len < kHeaderBytes) fail("a SEND of " + std::to_string(wc.byte_len) + " bytes");
  Header header;
  std::memcpy(&header, bytes, sizeof(header));
  if (header.magic != kHeaderMagic) protocolError("a SEND without collx's header");
  credit_ += static_cast<int>(header.slots);
  switch (header.kind) {
    case Kind::kCredit:
      postRecv(slot);  // a spare slot: not credited
      return;
    case Kind::kHello:
      onHello(bytes, wc.byte_len);
      postRecv(slot);
      ++owed_;
      return;
    case Kind::kFrame:
      break;
    default:
      protocolError("a SEND of unknown kind " + std::to_string(static_cast<int>(header.kind)));
  }
  if (!helloIn_) protocolError("a frame before the HELLO");
  if (wc.byte_len < kPayloadOffset)
    fail("a frame SEND of " + std::to_string(wc.byte_len) + " bytes");
  Frame frame;
  std::memcpy(&frame, bytes + kFrameOffset, sizeof(Frame));
  const std::uint64_t carried = wc.byte_len - kPayloadOffset;
  if (frame.carriesPayload() && frame.length != carried) {
    protocolError("a frame of " + std::to_string(frame.length) + " payload bytes in a SEND of " +
                  std::to_string(carried));
  }
  Sink sink = frameArrived(frame);
  // (A stale frame's payload goes nowhere.)
  if (sink.length > 0 && !sink.stale) std::memcpy(sink.dst, bytes + kPayloadOffset, sink.length);
  postRecv(slot);
  ++owed_;
  if (sink.length > 0 || frame.carriesPayload()) payloadArrived(sink);
}

void IbPair::afterProgress(std::chrono::steady_clock::time_point now) {
  if (failed_ || dead()) return;
  returnCredit();
  flushOut();
  if (owed_ >= std::max(1, options_.slots / 2) && established()) sendCreditOnly();
  if (inFlight() == 0 || peerGone_) {
    lastHeard_ = now;
    return;
  }
  if (!probing_ && sendsOut_ == 0 && established() && now - lastHeard_ > options_.probeAfter) {
    // Nothing heard for a while: a zero-length write that a dead peer cannot acknowledge.
    ibv_send_wr wr{};
    wr.wr_id = wrId(kTagProbe, 0);
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    ibv_send_wr* bad = nullptr;
    if (int rc = VerbsApi::postSend(qp_.get(), &wr, &bad); rc != 0) {
      fail(std::string("ibv_post_send (probe) failed: ") + std::strerror(rc));
    }
    ++sendsOut_;
    probing_ = true;
    lastHeard_ = now;
  }
}

// ---- closing and failure ------------------------------------------------------------------

void IbPair::sendGoodbye() noexcept {
  if (failed_ || dead() || goodbyeSent_ || !established()) return;
  goodbyeSent_ = true;
  try {
    Frame goodbye;
    goodbye.type = FrameType::kGoodbye;
    sendFrame(goodbye, nullptr, nullptr);
    flushOut();
  } catch (const std::exception& e) {
    COLLX_DEBUG(kIbverbs, "rank {}: no goodbye to rank {}: {}", link_.rank, peer(), e.what());
  }
}

void IbPair::sendError(ErrorKind kind, const std::string& text, int culprit) noexcept {
  if (failed_ || dead() || !established() || peerGone_) return;
  try {
    // Bounded by the peer's slot; the text goes right away (the frame is sent from a slot,
    // so the string may go away after this call).
    std::string body(1, static_cast<char>(kind));
    body += text;
    body.resize(std::min<std::size_t>(
        body.size(), std::min<std::uint64_t>(peerSlotPayload_, slotBytes_ - kPayloadOffset)));
    if (credit_ < 1 || freeSendSlots_.empty()) return;
    out_.clear();  // nothing else matters now
    Frame error;
    error.type = FrameType::kError;
    error.root = culprit;
    error.length = body.size();
    Out out;
    out.frame = error;
    out.payload = reinterpret_cast<const std::uint8_t*>(body.data());
    out.payloadLength = body.size();
    postOne(out);
  } catch (const std::exception& e) {
    COLLX_DEBUG(kIbverbs, "rank {}: no error sent to rank {}: {}", link_.rank, peer(), e.what());
  }
}

void IbPair::dropQueued() noexcept {
  failed_ = true;
  // The peer's writes into this rank's buffers stop here, before their registrations go.
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  if (qp_) api_.modifyQp(qp_.get(), &attr, IBV_QP_STATE);
  out_.clear();
  for (Push& p : pushes_) registrations_.release(p.handle);
  pushes_.clear();
  freePushes_.clear();
  for (Landing& landing : landings_) registrations_.release(landing.handle);
  landings_.clear();
}

}  // namespace collx::transport::ibverbs
