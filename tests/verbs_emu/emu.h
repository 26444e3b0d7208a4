// The userspace verbs device's internals (README.md says what it is and what it emulates).
//
// Objects: the ibv_* structure a caller sees is the first member of the emulator's own object
// (Context, Pd, Mr, Channel, Cq, Qp), so a pointer converts back with a static_cast of the
// first member's address (`from()`).
//
// Threads and locks: every object except CQs and completion channels is guarded by the
// process's Engine::mu, which the verbs calls take and the engine's wire thread holds while it
// handles what poll() reported (never while it sleeps in poll()). A CQ's entries have their
// own Cq::mu and a channel's events Channel::mu, so that polling a CQ (the caller's hot
// loop) does not wait for the wire thread. Order: Engine::mu, then Cq::mu, then Channel::mu.
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace collx::verbs_emu {

using Clock = std::chrono::steady_clock;

// Device limits (ibv_query_device reports them; create_qp/create_cq/post check them).
// The QP number is (listener port << 8) | index, so 256 QPs per process at most.
inline constexpr int kMaxQps = 256;
inline constexpr int kMaxQpWr = 16384;
inline constexpr int kMaxSge = 16;
inline constexpr int kMaxInline = 256;
inline constexpr int kMaxCqe = 65536;
inline constexpr int kMaxRdAtomic = 16;
inline constexpr std::uint64_t kMaxMessage = 1ull << 31;  // port max_msg_sz
inline constexpr std::uint32_t kPsnMask = 0xffffff;

struct Engine;
struct Qp;
struct Cq;
struct Conn;

template <typename Outer, typename Inner>
Outer* fromBase(Inner* inner) {
  return reinterpret_cast<Outer*>(inner);  // `base` is Outer's first member (standard layout)
}

struct Context {
  ibv_context base;
  Engine* engine = nullptr;
  int pds = 0;  // live children: ibv_close_device refuses while any remains
  int cqs = 0;
  int channels = 0;
};

struct Pd {
  ibv_pd base;
  Context* context = nullptr;
  int mrs = 0;
  int qps = 0;
};

struct Mr {
  ibv_mr base;
  Pd* pd = nullptr;
  int access = 0;
  // The physical frame of each page of [firstPage, ...) when it was registered (README:
  // "Stale registrations"); empty when pagemap gives no frames (the check is off).
  std::uintptr_t firstPage = 0;
  std::vector<std::uint64_t> frames;
};

struct Channel {
  ibv_comp_channel base;
  Context* context = nullptr;
  std::mutex mu;
  std::deque<Cq*> events;  // one per eventfd count; null: its CQ was destroyed
  int cqs = 0;             // guarded by Engine::mu
};

struct Cq {
  ibv_cq base;
  Context* context = nullptr;
  Channel* channel = nullptr;
  int qps = 0;  // QPs using it (Engine::mu)
  std::mutex mu;
  std::deque<ibv_wc> entries;
  int capacity = 0;
  bool armed = false;
  bool solicitedOnly = false;
  bool overrun = false;         // a completion found the CQ full: it was lost, the CQ is broken
  std::uint64_t delivered = 0;  // events returned by ibv_get_cq_event
  std::uint64_t acked = 0;      // events acknowledged by ibv_ack_cq_events
};

struct Sge {
  std::uint64_t addr;
  std::uint32_t length;
  std::uint32_t lkey;
};

// A work request on the send queue, copied at post time.
struct SendOp {
  std::uint64_t wrId = 0;
  ibv_wr_opcode opcode = IBV_WR_SEND;
  bool signaled = false;
  bool solicited = false;
  bool isInline = false;
  std::uint32_t imm = 0;  // as posted (network order)
  std::uint64_t remoteAddr = 0;
  std::uint32_t rkey = 0;
  std::vector<Sge> sges;
  std::vector<std::uint8_t> inlineData;
  std::uint64_t length = 0;
  std::uint32_t psn = 0;
  ibv_wc_status localError = IBV_WC_SUCCESS;  // found when its bytes were gathered
};

struct RecvOp {
  std::uint64_t wrId = 0;
  std::vector<Sge> sges;
};

struct Qp {
  ibv_qp base;
  Context* context = nullptr;
  Pd* pd = nullptr;
  Cq* sendCq = nullptr;
  Cq* recvCq = nullptr;
  int index = 0;
  bool sigAll = false;
  ibv_qp_cap cap{};
  ibv_qp_attr attr{};  // what modify_qp set (attr.qp_state mirrors base.state)

  // Send queue: [0, firstUnacked) completed unsignaled ops that still hold their slot (a
  // later signaled completion frees them, as on hardware); [firstUnacked, nextToSend) sent
  // and waiting for their response; [nextToSend, end) not yet sent.
  std::deque<SendOp> sq;
  std::size_t firstUnacked = 0;
  std::size_t nextToSend = 0;
  std::deque<RecvOp> rq;

  // Requester.
  Conn* out = nullptr;  // connection to the responder (open once its hello was accepted)
  bool outOpen = false;
  std::uint32_t nextPsn = 0;
  bool retryArmed = false;          // counting ack timeouts: no open connection while work waits
  int retriesLeft = 0;              // retry_cnt, again after every sign of progress
  Clock::time_point retryDeadline;  // the next ack timeout (and connection attempt)
  int rnrLeft = 0;
  Clock::time_point resumeAt;  // after an RNR NAK: nothing is sent before

  // Responder.
  Conn* in = nullptr;
  std::uint32_t expectedPsn = 0;
  bool nakPending = false;  // an RNR NAK went out for expectedPsn: later requests are dropped
  bool warnedDuplicates = false;
};

// The wire between two emulated QPs: requests from the requester, responses back.
struct WireHeader {
  std::uint32_t magic;
  std::uint8_t type;
  std::uint8_t flags;
  std::uint8_t code;  // NAK: its kind; RNR NAK: the responder's min_rnr_timer; hello ack: 1 ok
  std::uint8_t pad0;
  std::uint32_t psn;
  std::uint32_t imm;
  std::uint32_t rkey;
  std::uint32_t qpnA;  // hello: the requester's QPN
  std::uint32_t qpnB;  // hello: the responder's QPN
  std::uint32_t pad1;
  std::uint64_t addr;    // hello: the requester's IPv4 address; requests: the remote address
  std::uint64_t length;  // bytes that follow (SEND, WRITE, READ response); READ: bytes asked
};
static_assert(sizeof(WireHeader) == 48);

struct Conn {
  enum class State { kConnecting, kAwaitHelloAck, kAwaitHello, kOpen, kClosing, kClosed };
  int fd = -1;
  bool outgoing = false;
  State state = State::kClosed;
  Qp* qp = nullptr;
  WireHeader header{};
  std::size_t headerHave = 0;
  std::vector<std::uint8_t> payload;
  std::size_t payloadHave = 0;
  bool inPayload = false;
  std::deque<std::vector<std::uint8_t>> outQueue;
  std::size_t outOffset = 0;
  std::size_t outBytes = 0;
  std::string peer;  // ip:port, for messages
};

// One per process while a context is open: the listener every local QP is reached through,
// the wire thread, the QP and memory key tables.
struct Engine {
  std::mutex mu;
  std::uint32_t ip = 0;  // network order
  std::uint16_t port = 0;
  int listenFd = -1;
  int wakeFd = -1;
  int pagemapFd = -1;  // /proc/self/pagemap, for the frames of registered pages (-1: none)
  std::thread thread;
  bool stop = false;
  bool debug = false;
  int contexts = 0;
  std::array<Qp*, kMaxQps> qps{};
  std::unordered_map<std::uint32_t, Mr*> byLkey;
  std::unordered_map<std::uint32_t, Mr*> byRkey;
  std::uint32_t nextMrIndex = 1;
  std::vector<std::unique_ptr<Conn>> conns;

  // Wakes the wire thread (new work, a state change).
  void wake() noexcept;
  void run();

  // ---- with mu held --------------------------------------------------------------------
  // A completion on `cq`; `solicited` counts for ibv_req_notify_cq(cq, 1).
  void complete(Cq* cq, const ibv_wc& wc, bool solicited);
  // A work request of `qp` completes with IBV_WC_WR_FLUSH_ERR on `cq`.
  void flushed(const Qp& qp, Cq* cq, std::uint64_t wrId, ibv_wc_opcode opcode);
  // The QP enters the error state: every outstanding work request completes with
  // IBV_WC_WR_FLUSH_ERR, its connections close.
  void enterError(Qp& qp);
  // RESET: work requests vanish without completions; connections close.
  void reset(Qp& qp);
  void detach(Qp& qp);  // closes its connections
  // Fails the send queue's oldest outstanding op with `status`, then enterError().
  void failSend(Qp& qp, ibv_wc_status status, std::uint32_t vendorErr);
  // Sends what it can for a QP in RTS (wire thread).
  void pump(Qp& qp, Clock::time_point now);

  std::uint32_t qpn(int index) const noexcept {
    return (static_cast<std::uint32_t>(port) << 8) | static_cast<std::uint32_t>(index);
  }
  void log(const std::string& line) const;
};

// The link layer the device presents: Ethernet (RoCE v2, addressed by GID) by default,
// InfiniBand (addressed by LID) with COLLX_VERBS_EMU_LINK=ib.
bool infiniband();
// A port's LID in InfiniBand mode: the low 16 bits of its IPv4 address (the wire reaches a
// LID at that address with the upper 16 bits of this host's: one /16 subnet).
std::uint16_t lidOf(std::uint32_t ip);
// The IPv4 address (network order) whose wire reaches the port `ah` addresses: the GID's
// address (RoCE), or the LID's (InfiniBand without a GRH).
std::uint32_t addressOf(const Engine& engine, const ibv_ah_attr& ah);

// The physical frame numbers of `pages` pages from `firstPage` (0 for a page not present), read
// from /proc/self/pagemap. False when they cannot be read, or read as 0 although present (the
// kernel hides frames from a process without CAP_SYS_ADMIN).
bool readFrames(int pagemapFd, std::uintptr_t firstPage, std::size_t pages,
                std::vector<std::uint64_t>* frames);

// Whether [addr, addr + length) of `mr` still lies in the pages it was registered over; a
// mismatch says so on stderr ("stale memory registration"). True when the check is off.
bool framesUnchanged(const Engine& engine, const Mr& mr, std::uint64_t addr, std::uint64_t length);

// Acquires the process's engine (starts it for the first context); null with errno set and
// the reason on stderr when it cannot listen.
Engine* acquireEngine();
void releaseEngine(Engine* engine);

// The ack timeout of a QP: 4.096 us * 2^timeout, capped (README: "Timing"); 0 = none.
std::chrono::nanoseconds ackTimeout(std::uint8_t timeout);
// The RNR NAK delay that `code` (min_rnr_timer) encodes.
std::chrono::nanoseconds rnrDelay(std::uint8_t code);

}  // namespace collx::verbs_emu
