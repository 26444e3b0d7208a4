// The userspace verbs device's wire: one thread per process moves the work of every emulated
// RC queue pair over TCP to its peer's process and completes it (README.md: "The wire").
//
// A requester QP opens one connection to the responder's process (the address is in the
// QP's RTR attributes: the IPv4 address in the destination GID, the listener port in the
// destination QPN) and says hello (its QPN, the responder's, the PSN it starts at). The
// responder accepts the hello only for a QP of its own in RTR or RTS whose destination is
// that requester and whose expected PSN matches; anything else is what hardware would drop.
// Requests then flow in order (each with its PSN), and the responder answers each: ACK, a
// NAK (RNR, remote access, invalid request, remote operation) or a READ response. Each
// direction of a QP pair has its own connection.
#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "emu.h"

namespace collx::verbs_emu {
namespace {

constexpr std::uint32_t kMagic = 0x45565843;  // "CXVE"

enum MsgType : std::uint8_t {
  kHello = 1,
  kHelloAck,
  kSend,   // SEND and SEND WITH IMMEDIATE (flag kImm)
  kWrite,  // RDMA WRITE and WRITE WITH IMMEDIATE (flag kImm)
  kRead,   // RDMA READ request
  kAck,
  kNak,
  kReadResp,
};
enum Flags : std::uint8_t { kImm = 1, kSolicited = 2 };
enum NakCode : std::uint8_t { kNakRnr = 1, kNakAccess, kNakInvalid, kNakOperation };
enum Refusal : std::uint8_t {
  kAccepted = 1,
  kNoSuchQp,
  kNotReady,
  kWrongPeer,
  kPsnAhead,
};

const char* refusalText(std::uint8_t code) {
  switch (code) {
    case kNoSuchQp:
      return "no such QP";
    case kNotReady:
      return "the QP is not in RTR or RTS";
    case kWrongPeer:
      return "the QP's destination (GID, QPN) is another QP";
    case kPsnAhead:
      return "the requester's PSN is ahead of the responder's expected PSN";
    default:
      return "refused";
  }
}

// Bytes a connection may have queued for writing before the requester stops sending more.
constexpr std::size_t kMaxQueued = 4u << 20;
// Bytes read from one connection per round before the others get their turn.
constexpr std::size_t kReadBudget = 8u << 20;
// Reconnect attempts of a QP with an infinite ack timeout (timeout 0).
constexpr auto kInfiniteRetryPeriod = std::chrono::milliseconds(100);
// The longest ack timeout period (timeout 18: 1.07 s), so a test with the usual timeout
// 18-22 never waits minutes for IBV_WC_RETRY_EXC_ERR (README: "Timing").
constexpr int kMaxTimeoutExponent = 18;

std::mutex gEngineMu;
Engine* gEngine = nullptr;

bool envTrue(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' && std::strcmp(value, "0") != 0;
}

// The address this process's device has: COLLX_VERBS_EMU_IP, else the first IPv4 address of
// an interface that is up and not loopback (inside a network namespace: its veth), else
// 127.0.0.1.
bool chooseAddress(std::uint32_t* ip) {
  if (const char* forced = std::getenv("COLLX_VERBS_EMU_IP"); forced != nullptr && *forced) {
    in_addr a{};
    if (inet_pton(AF_INET, forced, &a) != 1) {
      std::fprintf(stderr, "collx_verbs_emu: COLLX_VERBS_EMU_IP='%s' is not an IPv4 address\n",
                   forced);
      return false;
    }
    *ip = a.s_addr;
    return true;
  }
  *ip = htonl(INADDR_LOOPBACK);
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return true;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    if (!(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK)) continue;
    *ip = reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr;
    break;
  }
  freeifaddrs(list);
  return true;
}

std::string ipText(std::uint32_t ip) {
  char text[INET_ADDRSTRLEN] = "?";
  in_addr a{};
  a.s_addr = ip;
  inet_ntop(AF_INET, &a, text, sizeof text);
  return text;
}

std::uint32_t gidIp(const ibv_gid& gid) {
  std::uint32_t ip = 0;
  std::memcpy(&ip, gid.raw + 12, 4);
  return ip;
}

}  // namespace

bool infiniband() {
  const char* link = std::getenv("COLLX_VERBS_EMU_LINK");
  return link != nullptr && std::strcmp(link, "ib") == 0;
}

std::uint16_t lidOf(std::uint32_t ip) {
  const std::uint16_t lid = static_cast<std::uint16_t>(ntohl(ip) & 0xffff);
  return lid != 0 ? lid : 1;
}

std::uint32_t addressOf(const Engine& engine, const ibv_ah_attr& ah) {
  if (!infiniband() || ah.is_global) return gidIp(ah.grh.dgid);
  return htonl((ntohl(engine.ip) & 0xffff0000u) | ah.dlid);
}

namespace {

// (a - b) mod 2^24, as a signed distance: > 0 when a is ahead of b.
int psnDistance(std::uint32_t a, std::uint32_t b) {
  const std::uint32_t d = (a - b) & kPsnMask;
  return d < (1u << 23) ? static_cast<int>(d) : static_cast<int>(d) - (1 << 24);
}

WireHeader header(MsgType type) {
  WireHeader h{};
  h.magic = kMagic;
  h.type = type;
  return h;
}

std::vector<std::uint8_t> message(const WireHeader& h, const std::uint8_t* payload = nullptr,
                                  std::size_t length = 0) {
  std::vector<std::uint8_t> bytes(sizeof h + length);
  std::memcpy(bytes.data(), &h, sizeof h);
  if (length != 0) std::memcpy(bytes.data() + sizeof h, payload, length);
  return bytes;
}

std::chrono::nanoseconds period(const Qp& qp) {
  return qp.attr.timeout == 0 ? std::chrono::nanoseconds(kInfiniteRetryPeriod)
                              : ackTimeout(qp.attr.timeout);
}

ibv_wc_opcode sendOpcode(ibv_wr_opcode opcode) {
  switch (opcode) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      return IBV_WC_RDMA_WRITE;
    case IBV_WR_RDMA_READ:
      return IBV_WC_RDMA_READ;
    default:
      return IBV_WC_SEND;
  }
}

}  // namespace

std::chrono::nanoseconds ackTimeout(std::uint8_t timeout) {
  const int exponent = std::min<int>(timeout, kMaxTimeoutExponent);
  return std::chrono::nanoseconds(4096ll << exponent);
}

std::chrono::nanoseconds rnrDelay(std::uint8_t code) {
  // The IB specification's encoding of min_rnr_timer, in units of 10 us.
  static constexpr int kTenMicroseconds[32] = {
      65536, 1,    2,    3,    4,    6,     8,     12,    16,    24,   32,
      48,    64,   96,   128,  192,  256,   384,   512,   768,   1024, 1536,
      2048,  3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152};
  return std::chrono::microseconds(10ll * kTenMicroseconds[code & 31]);
}

void Engine::log(const std::string& line) const {
  if (debug)
    std::fprintf(stderr, "collx_verbs_emu[%d]: %s\n", static_cast<int>(getpid()), line.c_str());
}

void Engine::wake() noexcept {
  const std::uint64_t one = 1;
  // Non-blocking: a full counter already wakes the thread.
  [[maybe_unused]] const auto n = ::write(wakeFd, &one, sizeof one);
}

bool readFrames(int pagemapFd, std::uintptr_t firstPage, std::size_t pages,
                std::vector<std::uint64_t>* frames) {
  if (pagemapFd < 0) return false;
  static const std::uintptr_t kPage = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
  frames->resize(pages);
  const std::size_t bytes = pages * sizeof(std::uint64_t);
  const off_t at = static_cast<off_t>(firstPage / kPage * sizeof(std::uint64_t));
  std::size_t have = 0;
  while (have < bytes) {
    const ssize_t n = pread(pagemapFd, reinterpret_cast<char*>(frames->data()) + have, bytes - have,
                            at + static_cast<off_t>(have));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    have += static_cast<std::size_t>(n);
  }
  // Bit 63: present; bits 0-54: the frame (0 without CAP_SYS_ADMIN).
  for (std::uint64_t& entry : *frames) {
    const bool present = (entry >> 63) & 1;
    entry &= (std::uint64_t{1} << 55) - 1;
    if (present && entry == 0) return false;
    if (!present) entry = 0;
  }
  return true;
}

bool framesUnchanged(const Engine& engine, const Mr& mr, std::uint64_t addr, std::uint64_t length) {
  if (mr.frames.empty() || length == 0) return true;
  static const std::uint64_t kPage = static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
  const std::uint64_t first = addr / kPage * kPage;
  const std::size_t skip = (first - mr.firstPage) / kPage;
  const std::size_t pages = (addr + length - first + kPage - 1) / kPage;
  std::vector<std::uint64_t> now;
  if (!readFrames(engine.pagemapFd, first, pages, &now)) return true;  // cannot tell
  for (std::size_t i = 0; i < pages; ++i) {
    if (now[i] == mr.frames[skip + i]) continue;
    char line[320];
    std::snprintf(line, sizeof line,
                  "collx_verbs_emu: stale memory registration: an access to [0x%llx, +%llu) "
                  "through MR lkey 0x%x rkey 0x%x: its page 0x%llx was frame 0x%llx when "
                  "registered and is %s now (unmapped, or mapped again, since ibv_reg_mr)\n",
                  static_cast<unsigned long long>(addr), static_cast<unsigned long long>(length),
                  mr.base.lkey, mr.base.rkey, static_cast<unsigned long long>(first + i * kPage),
                  static_cast<unsigned long long>(mr.frames[skip + i]),
                  now[i] == 0 ? "not present" : "another frame");
    std::fputs(line, stderr);
    return false;
  }
  return true;
}

namespace {

// ---- memory ---------------------------------------------------------------------------------

// The registered region that holds [addr, addr + length) under `key` in `pd` with every bit
// of `access`, over the pages it was registered on, or null: what hardware checks before it
// touches memory.
Mr* findMr(const Engine& engine, const std::unordered_map<std::uint32_t, Mr*>& keys,
           std::uint32_t key, const Pd* pd, std::uint64_t addr, std::uint64_t length, int access) {
  const auto it = keys.find(key);
  if (it == keys.end()) return nullptr;
  Mr* mr = it->second;
  if (mr->pd != pd || (mr->access & access) != access) return nullptr;
  const auto start = reinterpret_cast<std::uint64_t>(mr->base.addr);
  if (addr < start || length > mr->base.length || addr - start > mr->base.length - length) {
    return nullptr;
  }
  if (!framesUnchanged(engine, *mr, addr, length)) return nullptr;
  return mr;
}

// Reads a send's bytes out of its local buffers (lkeys checked) into `out` after `offset`.
ibv_wc_status gather(const Engine& engine, const Qp& qp, const SendOp& op,
                     std::vector<std::uint8_t>& out, std::size_t offset) {
  if (op.length > kMaxMessage) return IBV_WC_LOC_LEN_ERR;
  out.resize(offset + op.length);
  if (op.isInline) {
    std::memcpy(out.data() + offset, op.inlineData.data(), op.inlineData.size());
    return IBV_WC_SUCCESS;
  }
  std::size_t at = offset;
  for (const Sge& s : op.sges) {
    if (s.length == 0) continue;
    if (findMr(engine, engine.byLkey, s.lkey, qp.pd, s.addr, s.length, 0) == nullptr) {
      return IBV_WC_LOC_PROT_ERR;
    }
    std::memcpy(out.data() + at, reinterpret_cast<const void*>(s.addr), s.length);
    at += s.length;
  }
  return IBV_WC_SUCCESS;
}

// Writes `length` bytes into local buffers (lkeys with local write checked first).
ibv_wc_status scatter(const Engine& engine, const Qp& qp, const std::vector<Sge>& sges,
                      const std::uint8_t* data, std::uint64_t length) {
  std::uint64_t room = 0;
  for (const Sge& s : sges) room += s.length;
  if (room < length) return IBV_WC_LOC_LEN_ERR;
  std::uint64_t left = length;
  for (const Sge& s : sges) {
    if (left == 0) break;
    const std::uint64_t n = std::min<std::uint64_t>(left, s.length);
    if (n != 0 && findMr(engine, engine.byLkey, s.lkey, qp.pd, s.addr, n, IBV_ACCESS_LOCAL_WRITE) ==
                      nullptr) {
      return IBV_WC_LOC_PROT_ERR;
    }
    left -= n;
  }
  left = length;
  for (const Sge& s : sges) {
    if (left == 0) break;
    const std::uint64_t n = std::min<std::uint64_t>(left, s.length);
    std::memcpy(reinterpret_cast<void*>(s.addr), data, n);
    data += n;
    left -= n;
  }
  return IBV_WC_SUCCESS;
}

// ---- connections ------------------------------------------------------------------------------

void enqueue(Conn& conn, std::vector<std::uint8_t> bytes) {
  conn.outBytes += bytes.size();
  conn.outQueue.push_back(std::move(bytes));
}

// Ends a connection. An outgoing one (a requester's) drops what it had queued: those requests
// are resent, or flushed, by its QP. An incoming one first delivers its queued responses (a
// NAK before the responder's QP went to the error state).
void closeConn(Conn& conn) {
  if (conn.qp != nullptr) {
    Qp& qp = *conn.qp;
    if (conn.outgoing && qp.out == &conn) {
      qp.out = nullptr;
      qp.outOpen = false;
      qp.nextToSend = qp.firstUnacked;  // resent from the oldest unanswered on reconnect
    } else if (!conn.outgoing && qp.in == &conn) {
      qp.in = nullptr;
    }
    conn.qp = nullptr;
  }
  if (!conn.outgoing && conn.outBytes != 0 && conn.state != Conn::State::kClosed) {
    conn.state = Conn::State::kClosing;
  } else {
    conn.state = Conn::State::kClosed;
  }
}

void setSocketOptions(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

}  // namespace

void Engine::detach(Qp& qp) {
  if (qp.out != nullptr) closeConn(*qp.out);
  if (qp.in != nullptr) closeConn(*qp.in);
  qp.retryArmed = false;
}

void Engine::reset(Qp& qp) {
  detach(qp);
  qp.sq.clear();
  qp.rq.clear();
  qp.firstUnacked = 0;
  qp.nextToSend = 0;
  qp.nakPending = false;
  qp.warnedDuplicates = false;
  qp.resumeAt = {};
}

void Engine::flushed(const Qp& qp, Cq* cq, std::uint64_t wrId, ibv_wc_opcode opcode) {
  ibv_wc wc{};
  wc.wr_id = wrId;
  wc.status = IBV_WC_WR_FLUSH_ERR;
  wc.opcode = opcode;
  wc.qp_num = qp.base.qp_num;
  complete(cq, wc, false);
}

void Engine::enterError(Qp& qp) {
  if (qp.base.state == IBV_QPS_ERR) return;
  // Every outstanding request completes, signaled or not, in order.
  for (std::size_t i = qp.firstUnacked; i < qp.sq.size(); ++i) {
    flushed(qp, qp.sendCq, qp.sq[i].wrId, sendOpcode(qp.sq[i].opcode));
  }
  for (const RecvOp& r : qp.rq) flushed(qp, qp.recvCq, r.wrId, IBV_WC_RECV);
  reset(qp);
  qp.base.state = IBV_QPS_ERR;
  qp.attr.qp_state = IBV_QPS_ERR;
  qp.attr.cur_qp_state = IBV_QPS_ERR;
}

void Engine::failSend(Qp& qp, ibv_wc_status status, std::uint32_t vendorErr) {
  if (qp.firstUnacked < qp.sq.size()) {
    const SendOp& op = qp.sq[qp.firstUnacked];
    ibv_wc wc{};
    wc.wr_id = op.wrId;
    wc.status = status;  // an error completes even an unsignaled request
    wc.opcode = sendOpcode(op.opcode);
    wc.vendor_err = vendorErr;
    wc.qp_num = qp.base.qp_num;
    log("QP " + std::to_string(qp.base.qp_num) + ": wr_id " + std::to_string(op.wrId) + ": " +
        std::to_string(status));
    complete(qp.sendCq, wc, false);
    ++qp.firstUnacked;
  }
  enterError(qp);
}

namespace {

// ---- the requester -------------------------------------------------------------------------

void startConnect(Engine& engine, Qp& qp) {
  if (qp.out != nullptr) closeConn(*qp.out);
  const std::uint32_t ip = addressOf(engine, qp.attr.ah_attr);
  const std::uint16_t port = static_cast<std::uint16_t>(qp.attr.dest_qp_num >> 8);
  const std::string peer = ipText(ip) + ":" + std::to_string(port);
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    engine.log("socket: " + std::string(std::strerror(errno)));
    return;
  }
  setSocketOptions(fd);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_addr.s_addr = ip;
  to.sin_port = htons(port);
  const int rc = connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to);
  if (rc != 0 && errno != EINPROGRESS) {
    // Unreachable now: the ack timer runs on, and the next period tries again.
    engine.log("QP " + std::to_string(qp.base.qp_num) + ": connect " + peer + ": " +
               std::strerror(errno));
    ::close(fd);
    return;
  }
  auto conn = std::make_unique<Conn>();
  conn->fd = fd;
  conn->outgoing = true;
  conn->state = rc == 0 ? Conn::State::kAwaitHelloAck : Conn::State::kConnecting;
  conn->qp = &qp;
  conn->peer = peer;
  WireHeader h = header(kHello);
  h.qpnA = qp.base.qp_num;
  h.qpnB = qp.attr.dest_qp_num;
  h.psn = qp.firstUnacked < qp.sq.size() ? qp.sq[qp.firstUnacked].psn : qp.nextPsn;
  h.addr = engine.ip;
  enqueue(*conn, message(h));
  qp.out = conn.get();
  qp.outOpen = false;
  engine.conns.push_back(std::move(conn));
}

// Builds the request of `op` into `bytes`: false (and op.localError) when its local buffers
// fail their check.
bool buildRequest(const Engine& engine, const Qp& qp, SendOp& op,
                  std::vector<std::uint8_t>& bytes) {
  WireHeader h = header(kSend);
  h.psn = op.psn;
  h.imm = op.imm;
  h.flags = op.solicited ? kSolicited : 0;
  switch (op.opcode) {
    case IBV_WR_SEND_WITH_IMM:
      h.flags |= kImm;
      [[fallthrough]];
    case IBV_WR_SEND:
      h.type = kSend;
      break;
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      h.flags |= kImm;
      [[fallthrough]];
    case IBV_WR_RDMA_WRITE:
      h.type = kWrite;
      h.addr = op.remoteAddr;
      h.rkey = op.rkey;
      break;
    case IBV_WR_RDMA_READ:
      h.type = kRead;
      h.addr = op.remoteAddr;
      h.rkey = op.rkey;
      h.length = op.length;
      bytes = message(h);
      return true;
    default:
      op.localError = IBV_WC_LOC_QP_OP_ERR;
      return false;
  }
  h.length = op.length;
  const ibv_wc_status status = gather(engine, qp, op, bytes, sizeof h);
  if (status != IBV_WC_SUCCESS) {
    op.localError = status;
    return false;
  }
  std::memcpy(bytes.data(), &h, sizeof h);
  return true;
}

// The oldest outstanding request completed successfully.
void completeHead(Engine& engine, Qp& qp, std::uint32_t byteLen) {
  SendOp& op = qp.sq[qp.firstUnacked];
  ++qp.firstUnacked;
  qp.rnrLeft = qp.attr.rnr_retry;  // the RNR retry count is per message
  if (!op.signaled) return;        // keeps its slot until a signaled one completes
  ibv_wc wc{};
  wc.wr_id = op.wrId;
  wc.status = IBV_WC_SUCCESS;
  wc.opcode = sendOpcode(op.opcode);
  wc.byte_len = byteLen;
  wc.qp_num = qp.base.qp_num;
  engine.complete(qp.sendCq, wc, false);
  qp.sq.erase(qp.sq.begin(), qp.sq.begin() + static_cast<std::ptrdiff_t>(qp.firstUnacked));
  qp.nextToSend -= qp.firstUnacked;
  qp.firstUnacked = 0;
}

void onResponse(Engine& engine, Conn& conn, const WireHeader& h,
                const std::vector<std::uint8_t>& payload) {
  Qp& qp = *conn.qp;
  if (qp.base.state != IBV_QPS_RTS) return;
  qp.retriesLeft = qp.attr.retry_cnt;  // the responder answers: progress
  if (qp.firstUnacked >= qp.nextToSend) return;
  SendOp& op = qp.sq[qp.firstUnacked];
  if (h.psn != op.psn) return;  // an answer to a request sent before a go-back
  if (h.type == kAck) {
    if (op.opcode == IBV_WR_RDMA_READ) return;
    completeHead(engine, qp, static_cast<std::uint32_t>(op.length));
  } else if (h.type == kReadResp) {
    if (op.opcode != IBV_WR_RDMA_READ) return;
    const ibv_wc_status status = payload.size() != op.length
                                     ? IBV_WC_BAD_RESP_ERR
                                     : scatter(engine, qp, op.sges, payload.data(), payload.size());
    if (status != IBV_WC_SUCCESS) {
      engine.failSend(qp, status, 0);
      return;
    }
    completeHead(engine, qp, static_cast<std::uint32_t>(op.length));
  } else if (h.type == kNak) {
    switch (h.code) {
      case kNakRnr: {
        if (qp.attr.rnr_retry != 7) {  // 7: retry forever
          if (qp.rnrLeft == 0) {
            engine.failSend(qp, IBV_WC_RNR_RETRY_EXC_ERR, 0);
            return;
          }
          --qp.rnrLeft;
        }
        // Go back: this request and every later one are sent again after the responder's
        // RNR delay (it drops the later ones until this one comes again).
        qp.nextToSend = qp.firstUnacked;
        qp.resumeAt = Clock::now() + rnrDelay(h.imm & 31);
        engine.log("QP " + std::to_string(qp.base.qp_num) + ": RNR NAK for PSN " +
                   std::to_string(h.psn) + ", " + std::to_string(qp.rnrLeft) + " retries left");
        break;
      }
      case kNakAccess:
        engine.failSend(qp, IBV_WC_REM_ACCESS_ERR, 0);
        break;
      case kNakInvalid:
        engine.failSend(qp, IBV_WC_REM_INV_REQ_ERR, 0);
        break;
      default:
        engine.failSend(qp, IBV_WC_REM_OP_ERR, 0);
        break;
    }
  }
}

// ---- the responder --------------------------------------------------------------------------

void respond(Conn& conn, MsgType type, std::uint32_t psn, std::uint8_t code = 0,
             std::uint32_t imm = 0) {
  WireHeader h = header(type);
  h.psn = psn;
  h.code = code;
  h.imm = imm;
  enqueue(conn, message(h));
}

void onHello(Engine& engine, Conn& conn, const WireHeader& h) {
  std::uint8_t verdict = kAccepted;
  Qp* qp = nullptr;
  if ((h.qpnB >> 8) != engine.port || (qp = engine.qps[h.qpnB & 0xff]) == nullptr ||
      qp->base.qp_num != h.qpnB) {
    verdict = kNoSuchQp;
  } else if (qp->base.state != IBV_QPS_RTR && qp->base.state != IBV_QPS_RTS) {
    verdict = kNotReady;
  } else if (qp->attr.dest_qp_num != h.qpnA ||
             addressOf(engine, qp->attr.ah_attr) != static_cast<std::uint32_t>(h.addr)) {
    verdict = kWrongPeer;
  } else if (psnDistance(h.psn, qp->expectedPsn) > 0) {
    verdict = kPsnAhead;
  }
  WireHeader ack = header(kHelloAck);
  ack.code = verdict;
  enqueue(conn, message(ack));
  if (verdict != kAccepted) {
    engine.log("refused a hello from " + conn.peer + " for QPN " + std::to_string(h.qpnB) + ": " +
               refusalText(verdict));
    conn.state = Conn::State::kClosing;
    return;
  }
  if (psnDistance(h.psn, qp->expectedPsn) < 0 && !qp->warnedDuplicates) {
    // Hardware takes the requests below the expected PSN for duplicates: answered, never
    // executed. Right after a reconnect that is correct; at the start it is a QP pair whose
    // sq_psn and rq_psn differ, which loses messages silently on a NIC too.
    qp->warnedDuplicates = true;
    std::fprintf(stderr,
                 "collx_verbs_emu: QP %u: requester QP %u starts at PSN %u, below the expected "
                 "PSN %u: those requests count as duplicates (not executed). Do the sq_psn and "
                 "the peer's rq_psn differ?\n",
                 qp->base.qp_num, h.qpnA, h.psn, qp->expectedPsn);
  }
  if (qp->in != nullptr) closeConn(*qp->in);  // the requester reconnected
  qp->in = &conn;
  conn.qp = qp;
  conn.state = Conn::State::kOpen;
}

// A request that fails the responder's checks: a NAK, and the responder's QP goes to the
// error state too (a class C error of the IB specification, as rxe does it).
void responderFatal(Engine& engine, Conn& conn, Qp& qp, std::uint32_t psn, NakCode code,
                    const char* why) {
  respond(conn, kNak, psn, code);
  engine.log("QP " + std::to_string(qp.base.qp_num) + ": PSN " + std::to_string(psn) + ": " + why);
  engine.enterError(qp);
}

void rnr(Engine& engine, Conn& conn, Qp& qp, std::uint32_t psn) {
  respond(conn, kNak, psn, kNakRnr, qp.attr.min_rnr_timer);
  qp.nakPending = true;
  engine.log("QP " + std::to_string(qp.base.qp_num) + ": no receive posted for PSN " +
             std::to_string(psn) + ": RNR NAK");
}

// Whether the remote access [addr, addr + length) is allowed; zero-length accesses check no
// key (as on hardware).
bool remoteAccessOk(const Engine& engine, const Qp& qp, const WireHeader& h, int access) {
  if ((static_cast<int>(qp.attr.qp_access_flags) & access) != access) return false;
  if (h.length == 0) return true;
  return findMr(engine, engine.byRkey, h.rkey, qp.pd, h.addr, h.length, access) != nullptr;
}

void onRequest(Engine& engine, Conn& conn, const WireHeader& h,
               const std::vector<std::uint8_t>& payload) {
  Qp& qp = *conn.qp;
  if (qp.base.state != IBV_QPS_RTR && qp.base.state != IBV_QPS_RTS) return;
  const int distance = psnDistance(h.psn, qp.expectedPsn);
  if (distance > 0) return;  // after a NAK: dropped until the NAKed request comes again
  const bool duplicate = distance < 0;
  if (duplicate && h.type != kRead) {
    respond(conn, kAck, h.psn);  // executed before: answered again, not executed again
    return;
  }
  const bool withImm = (h.flags & kImm) != 0;
  switch (h.type) {
    case kSend: {
      if (qp.rq.empty()) {
        rnr(engine, conn, qp, h.psn);
        return;
      }
      const RecvOp recv = std::move(qp.rq.front());
      qp.rq.pop_front();
      const ibv_wc_status status = scatter(engine, qp, recv.sges, payload.data(), h.length);
      ibv_wc wc{};
      wc.wr_id = recv.wrId;
      wc.status = status;
      wc.opcode = IBV_WC_RECV;
      wc.byte_len = static_cast<std::uint32_t>(h.length);
      wc.qp_num = qp.base.qp_num;
      wc.src_qp = qp.attr.dest_qp_num;
      if (withImm) {
        wc.imm_data = h.imm;
        wc.wc_flags = IBV_WC_WITH_IMM;
      }
      engine.complete(qp.recvCq, wc, (h.flags & kSolicited) != 0);
      if (status == IBV_WC_LOC_LEN_ERR) {
        responderFatal(engine, conn, qp, h.psn, kNakInvalid, "SEND longer than the receive");
        return;
      }
      if (status != IBV_WC_SUCCESS) {
        responderFatal(engine, conn, qp, h.psn, kNakOperation, "bad lkey in the receive");
        return;
      }
      break;
    }
    case kWrite: {
      if (withImm && qp.rq.empty()) {
        rnr(engine, conn, qp, h.psn);
        return;
      }
      if (!remoteAccessOk(engine, qp, h, IBV_ACCESS_REMOTE_WRITE)) {
        responderFatal(engine, conn, qp, h.psn, kNakAccess, "RDMA WRITE: remote access error");
        return;
      }
      if (h.length != 0) std::memcpy(reinterpret_cast<void*>(h.addr), payload.data(), h.length);
      if (withImm) {
        const RecvOp recv = std::move(qp.rq.front());
        qp.rq.pop_front();
        ibv_wc wc{};
        wc.wr_id = recv.wrId;
        wc.status = IBV_WC_SUCCESS;
        wc.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
        wc.byte_len = static_cast<std::uint32_t>(h.length);
        wc.imm_data = h.imm;
        wc.wc_flags = IBV_WC_WITH_IMM;
        wc.qp_num = qp.base.qp_num;
        wc.src_qp = qp.attr.dest_qp_num;
        engine.complete(qp.recvCq, wc, (h.flags & kSolicited) != 0);
      }
      break;
    }
    case kRead: {
      if (qp.attr.max_dest_rd_atomic == 0) {
        responderFatal(engine, conn, qp, h.psn, kNakInvalid,
                       "RDMA READ to a QP with max_dest_rd_atomic 0");
        return;
      }
      if (h.length > kMaxMessage || !remoteAccessOk(engine, qp, h, IBV_ACCESS_REMOTE_READ)) {
        responderFatal(engine, conn, qp, h.psn, kNakAccess, "RDMA READ: remote access error");
        return;
      }
      WireHeader r = header(kReadResp);
      r.psn = h.psn;
      r.length = h.length;
      enqueue(conn, message(r, reinterpret_cast<const std::uint8_t*>(h.addr), h.length));
      if (duplicate) return;
      qp.expectedPsn = (qp.expectedPsn + 1) & kPsnMask;
      qp.nakPending = false;
      return;
    }
    default:
      return;
  }
  qp.expectedPsn = (qp.expectedPsn + 1) & kPsnMask;
  qp.nakPending = false;
  respond(conn, kAck, h.psn);
}

bool hasPayload(std::uint8_t type) { return type == kSend || type == kWrite || type == kReadResp; }

// A whole message arrived on `conn`.
void dispatch(Engine& engine, Conn& conn, const WireHeader& h,
              const std::vector<std::uint8_t>& payload) {
  using State = Conn::State;
  if (conn.state == State::kAwaitHello && h.type == kHello) {
    onHello(engine, conn, h);
  } else if (conn.state == State::kAwaitHelloAck && h.type == kHelloAck) {
    if (conn.qp == nullptr) return;
    if (h.code != kAccepted) {
      engine.log("QP " + std::to_string(conn.qp->base.qp_num) + ": " + conn.peer +
                 " refused the connection: " + refusalText(h.code));
      closeConn(conn);
      return;
    }
    conn.state = State::kOpen;
    conn.qp->outOpen = true;
    conn.qp->retryArmed = false;
    conn.qp->retriesLeft = conn.qp->attr.retry_cnt;  // progress: the count starts again
    conn.qp->nextToSend = conn.qp->firstUnacked;
  } else if (conn.state == State::kOpen && !conn.outgoing && conn.qp != nullptr &&
             (h.type == kSend || h.type == kWrite || h.type == kRead)) {
    onRequest(engine, conn, h, payload);
  } else if (conn.state == State::kOpen && conn.outgoing && conn.qp != nullptr &&
             (h.type == kAck || h.type == kNak || h.type == kReadResp)) {
    onResponse(engine, conn, h, payload);
  } else if (conn.state != State::kClosing && conn.state != State::kClosed) {
    engine.log("unexpected message type " + std::to_string(h.type) + " from " + conn.peer);
    closeConn(conn);
  }
}

// Reads what arrived; false when the connection ended.
bool readConn(Engine& engine, Conn& conn) {
  std::size_t budget = kReadBudget;
  while (budget > 0 && conn.state != Conn::State::kClosed) {
    ssize_t n;
    if (!conn.inPayload) {
      n = recv(conn.fd, reinterpret_cast<std::uint8_t*>(&conn.header) + conn.headerHave,
               sizeof conn.header - conn.headerHave, 0);
    } else {
      n = recv(conn.fd, conn.payload.data() + conn.payloadHave,
               conn.payload.size() - conn.payloadHave, 0);
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    budget -= std::min<std::size_t>(budget, static_cast<std::size_t>(n));
    if (!conn.inPayload) {
      conn.headerHave += static_cast<std::size_t>(n);
      if (conn.headerHave < sizeof conn.header) continue;
      if (conn.header.magic != kMagic || conn.header.length > kMaxMessage) {
        engine.log("garbage from " + conn.peer);
        return false;
      }
      if (hasPayload(conn.header.type) && conn.header.length != 0) {
        conn.payload.resize(conn.header.length);
        conn.payloadHave = 0;
        conn.inPayload = true;
        continue;
      }
      conn.payload.clear();
    } else {
      conn.payloadHave += static_cast<std::size_t>(n);
      if (conn.payloadHave < conn.payload.size()) continue;
    }
    conn.headerHave = 0;
    conn.inPayload = false;
    const WireHeader h = conn.header;
    dispatch(engine, conn, h, conn.payload);
    if (conn.payload.capacity() > (1u << 20)) std::vector<std::uint8_t>().swap(conn.payload);
  }
  return true;
}

// Writes what is queued; false when the connection broke.
bool flushConn(Conn& conn) {
  while (!conn.outQueue.empty()) {
    const std::vector<std::uint8_t>& front = conn.outQueue.front();
    const ssize_t n = send(conn.fd, front.data() + conn.outOffset, front.size() - conn.outOffset,
                           MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    conn.outOffset += static_cast<std::size_t>(n);
    conn.outBytes -= static_cast<std::size_t>(n);
    if (conn.outOffset == front.size()) {
      conn.outQueue.pop_front();
      conn.outOffset = 0;
    }
  }
  return true;
}

// Timers, a local error at the head of the send queue, and sending, for one QP.
void service(Engine& engine, Qp& qp, Clock::time_point now) {
  if (qp.base.state != IBV_QPS_RTS) return;
  if (qp.retryArmed && qp.outOpen) qp.retryArmed = false;
  if (qp.retryArmed && now >= qp.retryDeadline) {
    // An ack timeout: hardware resends and counts; here the connection is tried again. While
    // the TCP connection is up and only the hello's answer is missing, the peer's process
    // lives (perhaps stopped, whose NIC would answer): that period does not count.
    qp.retryDeadline = std::max(qp.retryDeadline + period(qp), now);
    const bool processAlive = qp.out != nullptr && qp.out->state == Conn::State::kAwaitHelloAck;
    if (!processAlive) {
      if (qp.attr.timeout != 0) {
        if (qp.retriesLeft == 0) {
          engine.log("QP " + std::to_string(qp.base.qp_num) + ": no answer from QPN " +
                     std::to_string(qp.attr.dest_qp_num) + ": retry count exceeded");
          engine.failSend(qp, IBV_WC_RETRY_EXC_ERR, 0);
          return;
        }
        --qp.retriesLeft;
      }
      startConnect(engine, qp);  // also replaces a connect that hangs
    }
  }
  engine.pump(qp, now);
}

}  // namespace

void Engine::pump(Qp& qp, Clock::time_point now) {
  if (qp.base.state != IBV_QPS_RTS) return;
  const bool work = qp.firstUnacked < qp.sq.size();
  if (!qp.outOpen) {
    // No open connection while work waits: the ack timer runs (a dead peer, a peer not yet
    // in RTR, a refused hello all end in IBV_WC_RETRY_EXC_ERR, as unanswered packets do).
    // The first attempt is at once, the next ones once per period (service()).
    if (work && !qp.retryArmed) {
      qp.retryArmed = true;
      qp.retryDeadline = now + period(qp);
      if (qp.out == nullptr) startConnect(*this, qp);
    }
    return;
  }
  while (qp.nextToSend < qp.sq.size() && qp.out->outBytes < kMaxQueued && now >= qp.resumeAt) {
    SendOp& op = qp.sq[qp.nextToSend];
    if (op.localError != IBV_WC_SUCCESS) break;
    std::vector<std::uint8_t> bytes;
    if (!buildRequest(*this, qp, op, bytes)) break;
    enqueue(*qp.out, std::move(bytes));
    ++qp.nextToSend;
  }
  // A request whose local buffers failed completes in error once every earlier one has.
  if (qp.nextToSend < qp.sq.size() && qp.firstUnacked == qp.nextToSend &&
      qp.sq[qp.nextToSend].localError != IBV_WC_SUCCESS) {
    failSend(qp, qp.sq[qp.nextToSend].localError, 0);
  }
}

void Engine::run() {
  std::vector<pollfd> fds;
  std::vector<Conn*> polled;
  std::unique_lock lock(mu);
  while (!stop) {
    const Clock::time_point now = Clock::now();
    for (Qp* qp : qps) {
      if (qp != nullptr) service(*this, *qp, now);
    }
    for (auto& conn : conns) {
      if (conn->state != Conn::State::kClosed && conn->state != Conn::State::kConnecting &&
          conn->outBytes != 0 && !flushConn(*conn)) {
        closeConn(*conn);
        conn->state = Conn::State::kClosed;
      }
      if (conn->state == Conn::State::kClosing && conn->outBytes == 0) {
        conn->state = Conn::State::kClosed;
      }
    }
    std::erase_if(conns, [](const std::unique_ptr<Conn>& conn) {
      if (conn->state != Conn::State::kClosed) return false;
      ::close(conn->fd);
      return true;
    });

    // Sleep until something arrives, the wake fd rings, or the nearest timer.
    Clock::time_point until = now + std::chrono::milliseconds(100);
    for (Qp* qp : qps) {
      if (qp == nullptr || qp->base.state != IBV_QPS_RTS) continue;
      if (qp->retryArmed) until = std::min(until, qp->retryDeadline);
      if (qp->outOpen && qp->nextToSend < qp->sq.size() && qp->resumeAt > now) {
        until = std::min(until, qp->resumeAt);
      }
    }
    fds.clear();
    polled.clear();
    fds.push_back({wakeFd, POLLIN, 0});
    fds.push_back({listenFd, POLLIN, 0});
    for (auto& conn : conns) {
      short events = POLLIN;
      if (conn->state == Conn::State::kConnecting || conn->outBytes != 0) events |= POLLOUT;
      fds.push_back({conn->fd, events, 0});
      polled.push_back(conn.get());
    }
    const auto wait = std::max<Clock::duration>(until - Clock::now(), Clock::duration::zero());
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(wait).count();
    const timespec timeout{static_cast<time_t>(ns / 1000000000),
                           static_cast<long>(ns % 1000000000)};
    lock.unlock();
    ppoll(fds.data(), fds.size(), &timeout, nullptr);
    lock.lock();
    if (stop) break;

    if (fds[0].revents & POLLIN) {
      std::uint64_t count;
      [[maybe_unused]] const auto n = ::read(wakeFd, &count, sizeof count);
    }
    if (fds[1].revents & POLLIN) {
      for (;;) {
        sockaddr_in from{};
        socklen_t length = sizeof from;
        const int fd = accept4(listenFd, reinterpret_cast<sockaddr*>(&from), &length,
                               SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) break;
        setSocketOptions(fd);
        auto conn = std::make_unique<Conn>();
        conn->fd = fd;
        conn->state = Conn::State::kAwaitHello;
        conn->peer = ipText(from.sin_addr.s_addr) + ":" + std::to_string(ntohs(from.sin_port));
        conns.push_back(std::move(conn));
      }
    }
    for (std::size_t i = 0; i < polled.size(); ++i) {
      Conn& conn = *polled[i];
      const short revents = fds[i + 2].revents;
      if (revents == 0 || conn.state == Conn::State::kClosed) continue;
      if (conn.state == Conn::State::kConnecting) {
        int error = 0;
        socklen_t length = sizeof error;
        getsockopt(conn.fd, SOL_SOCKET, SO_ERROR, &error, &length);
        if (error != 0 || (revents & (POLLERR | POLLHUP))) {
          log("connect " + conn.peer + ": " + std::strerror(error != 0 ? error : ECONNREFUSED));
          closeConn(conn);
          continue;
        }
        if (!(revents & POLLOUT)) continue;
        conn.state = Conn::State::kAwaitHelloAck;
      }
      if ((revents & POLLOUT) && !flushConn(conn)) {
        closeConn(conn);
        conn.state = Conn::State::kClosed;
        continue;
      }
      if (revents & (POLLIN | POLLHUP | POLLERR)) {
        if (!readConn(*this, conn)) {
          // The peer's process died (the kernel closed its sockets), or its QP left RTR/RTS.
          log("connection " + conn.peer + " ended");
          closeConn(conn);
          conn.state = Conn::State::kClosed;
        }
      }
    }
  }
  for (auto& conn : conns) {
    closeConn(*conn);
    ::close(conn->fd);
  }
  conns.clear();
}

Engine* acquireEngine() {
  std::lock_guard global(gEngineMu);
  if (gEngine != nullptr) {
    std::lock_guard lock(gEngine->mu);
    ++gEngine->contexts;
    return gEngine;
  }
  auto engine = std::make_unique<Engine>();
  engine->debug = envTrue("COLLX_VERBS_EMU_DEBUG");
  if (!chooseAddress(&engine->ip)) {
    errno = EINVAL;
    return nullptr;
  }
  engine->listenFd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_addr.s_addr = engine->ip;
  at.sin_port = 0;
  socklen_t length = sizeof at;
  if (engine->listenFd < 0 ||
      bind(engine->listenFd, reinterpret_cast<sockaddr*>(&at), sizeof at) != 0 ||
      listen(engine->listenFd, 128) != 0 ||
      getsockname(engine->listenFd, reinterpret_cast<sockaddr*>(&at), &length) != 0) {
    const int error = errno;
    std::fprintf(stderr, "collx_verbs_emu: cannot listen on %s: %s\n", ipText(engine->ip).c_str(),
                 std::strerror(error));
    if (engine->listenFd >= 0) ::close(engine->listenFd);
    errno = error;
    return nullptr;
  }
  engine->port = ntohs(at.sin_port);
  engine->wakeFd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (engine->wakeFd < 0) {
    const int error = errno;
    ::close(engine->listenFd);
    errno = error;
    return nullptr;
  }
  // Frames of registered pages (README: "Stale registrations"); without it the check is off.
  engine->pagemapFd = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  engine->contexts = 1;
  engine->log("device emu0 at " + ipText(engine->ip) + ":" + std::to_string(engine->port));
  Engine* raw = engine.get();
  raw->thread = std::thread([raw] {
    pthread_setname_np(pthread_self(), "verbs-emu-wire");  // findable in /proc/<pid>/task
    raw->run();
  });
  gEngine = engine.release();
  return gEngine;
}

void releaseEngine(Engine* engine) {
  std::lock_guard global(gEngineMu);
  {
    std::lock_guard lock(engine->mu);
    if (--engine->contexts > 0) return;
    engine->stop = true;
  }
  engine->wake();
  // The thread sees `stop` within one round (its sleeps are bounded by 100 ms and the wake).
  engine->thread.join();
  ::close(engine->listenFd);
  ::close(engine->wakeFd);
  if (engine->pagemapFd >= 0) ::close(engine->pagemapFd);
  delete engine;
  gEngine = nullptr;
}

}  // namespace collx::verbs_emu
