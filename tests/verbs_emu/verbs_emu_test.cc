// The userspace verbs device (README.md), driven through collx's loader
// (transport/src/ibverbs/verbs_api.h) as collx's verbs transport will drive it: every rule it
// promises, negative cases included, with QP pairs in one process (both ends on this
// process's device) and in two (fork: the peer's own device, a peer killed with SIGKILL).
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "ibverbs/verbs_api.h"

namespace collx::transport::ibverbs {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr int kAllAccess =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
constexpr int kInitMask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
constexpr int kRtrMask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                         IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
constexpr int kRtsMask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                         IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;

void require(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what + " failed (errno " + std::to_string(errno) + ")");
}

std::shared_ptr<const VerbsLibrary> loadEmulator() {
  std::string why;
  auto library = VerbsLibrary::load(COLLX_VERBS_EMU_PATH, &why);
  require(library != nullptr, "loading the emulator: " + why);
  return library;
}

// What a peer needs to reach a QP: its GID and QPN (and the PSN it starts at).
struct Address {
  ibv_gid gid;
  std::uint32_t qpn;
  std::uint32_t psn;
};

struct QpOptions {
  int access = kAllAccess;    // the QP's qp_access_flags
  std::uint8_t timeout = 14;  // 67 ms
  std::uint8_t retryCnt = 7;
  std::uint8_t rnrRetry = 7;      // forever
  std::uint8_t minRnrTimer = 12;  // 0.64 ms
  std::uint8_t maxDestRdAtomic = 4;
  std::uint8_t maxRdAtomic = 4;
  std::uint32_t maxSendWr = 64;
  std::uint32_t maxRecvWr = 64;
  std::uint32_t maxSge = 4;
  std::uint32_t maxInline = 64;
  int cqe = 1024;
  bool sigAll = true;
  bool channel = false;
  std::uint32_t sqPsn = 0x1234;
  std::uint32_t rqPsn = 0x1234;  // what this QP expects from its peer
};

std::string statusText(const ibv_wc& wc) {
  return "wr_id " + std::to_string(wc.wr_id) + " status " + std::to_string(wc.status);
}

// One end: a context of the device, a PD, a CQ (both queues), maybe a channel, an RC QP.
// Members are destroyed in reverse order of declaration: QP, CQ, channel, PD, context.
struct Endpoint {
  explicit Endpoint(const QpOptions& o = {}) : library(loadEmulator()), options(o) {
    const VerbsApi& a = api();
    DeviceList list(library);
    require(list.ok() && list.size() == 1, "listing emu0");
    context = Context(library, a.openDevice(list[0]), a.closeDevice, "context");
    require(bool(context), "ibv_open_device");
    pd = ProtectionDomain(library, a.allocPd(context.get()), a.deallocPd, "PD");
    require(bool(pd), "ibv_alloc_pd");
    if (o.channel) {
      channel = CompletionChannel(library, a.createCompChannel(context.get()), a.destroyCompChannel,
                                  "channel");
      require(bool(channel), "ibv_create_comp_channel");
    }
    cq = CompletionQueue(library, a.createCq(context.get(), o.cqe, this, channel.get(), 0),
                         a.destroyCq, "CQ");
    require(bool(cq), "ibv_create_cq");
    ibv_qp_init_attr init{};
    init.send_cq = cq.get();
    init.recv_cq = cq.get();
    init.cap.max_send_wr = o.maxSendWr;
    init.cap.max_recv_wr = o.maxRecvWr;
    init.cap.max_send_sge = o.maxSge;
    init.cap.max_recv_sge = o.maxSge;
    init.cap.max_inline_data = o.maxInline;
    init.qp_type = IBV_QPT_RC;
    init.sq_sig_all = o.sigAll ? 1 : 0;
    qp = QueuePair(library, a.createQp(pd.get(), &init), a.destroyQp, "QP");
    require(bool(qp), "ibv_create_qp");
  }

  const VerbsApi& api() const { return library->api(); }

  Address address() const {
    Address address{};
    require(api().queryGid(context.get(), 1, 0, &address.gid) == 0, "ibv_query_gid");
    address.qpn = qp->qp_num;
    address.psn = options.sqPsn;
    return address;
  }

  int toInit(int mask = kInitMask, int access = -1) {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_INIT;
    attr.pkey_index = 0;
    attr.port_num = 1;
    attr.qp_access_flags = static_cast<unsigned>(access < 0 ? options.access : access);
    return api().modifyQp(qp.get(), &attr, mask);
  }
  int toRtr(const Address& remote, int mask = kRtrMask) {
    ibv_qp_attr attr = rtrAttr(remote);
    return api().modifyQp(qp.get(), &attr, mask);
  }
  ibv_qp_attr rtrAttr(const Address& remote) const {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_RTR;
    attr.path_mtu = IBV_MTU_1024;
    attr.dest_qp_num = remote.qpn;
    attr.rq_psn = options.rqPsn;
    attr.max_dest_rd_atomic = options.maxDestRdAtomic;
    attr.min_rnr_timer = options.minRnrTimer;
    attr.ah_attr.is_global = 1;
    attr.ah_attr.grh.dgid = remote.gid;
    attr.ah_attr.grh.sgid_index = 0;
    attr.ah_attr.grh.hop_limit = 1;
    attr.ah_attr.port_num = 1;
    return attr;
  }
  int toRts(int mask = kRtsMask) {
    ibv_qp_attr attr = rtsAttr();
    return api().modifyQp(qp.get(), &attr, mask);
  }
  ibv_qp_attr rtsAttr() const {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_RTS;
    attr.timeout = options.timeout;
    attr.retry_cnt = options.retryCnt;
    attr.rnr_retry = options.rnrRetry;
    attr.sq_psn = options.sqPsn;
    attr.max_rd_atomic = options.maxRdAtomic;
    return attr;
  }
  int toState(ibv_qp_state state) {
    ibv_qp_attr attr{};
    attr.qp_state = state;
    return api().modifyQp(qp.get(), &attr, IBV_QP_STATE);
  }
  void connect(const Address& remote) {
    require(toInit() == 0, "RESET->INIT");
    connectFromInit(remote);
  }
  // Receives may be posted in INIT, before the peer's address is known.
  void connectFromInit(const Address& remote) {
    require(toRtr(remote) == 0, "INIT->RTR");
    require(toRts() == 0, "RTR->RTS");
  }
  ibv_qp_state state() const {
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    require(api().queryQp(qp.get(), &attr, IBV_QP_STATE, &init) == 0, "ibv_query_qp");
    return attr.qp_state;
  }

  MemoryRegion reg(void* addr, std::size_t length, int access = kAllAccess) {
    return MemoryRegion(library, api().regMr(pd.get(), addr, length, access), api().deregMr, "MR");
  }

  int post(ibv_wr_opcode opcode, std::uint64_t wrId, std::vector<ibv_sge> sges, int flags = 0,
           std::uint64_t remote = 0, std::uint32_t rkey = 0, std::uint32_t imm = 0) {
    ibv_send_wr wr{};
    wr.wr_id = wrId;
    wr.opcode = opcode;
    wr.sg_list = sges.data();
    wr.num_sge = static_cast<int>(sges.size());
    wr.send_flags = static_cast<unsigned>(flags);
    wr.imm_data = imm;
    wr.wr.rdma.remote_addr = remote;
    wr.wr.rdma.rkey = rkey;
    ibv_send_wr* bad = nullptr;
    const int rc = VerbsApi::postSend(qp.get(), &wr, &bad);
    if (rc != 0 && bad != &wr) throw std::runtime_error("post_send failed without bad_wr");
    return rc;
  }
  int recv(std::uint64_t wrId, std::vector<ibv_sge> sges) {
    ibv_recv_wr wr{};
    wr.wr_id = wrId;
    wr.sg_list = sges.data();
    wr.num_sge = static_cast<int>(sges.size());
    ibv_recv_wr* bad = nullptr;
    const int rc = VerbsApi::postRecv(qp.get(), &wr, &bad);
    if (rc != 0 && bad != &wr) throw std::runtime_error("post_recv failed without bad_wr");
    return rc;
  }

  // Polls until `n` completions came or `timeout` passed; returns what came.
  std::vector<ibv_wc> poll(std::size_t n, Clock::duration timeout = 20s) {
    std::vector<ibv_wc> got;
    const auto deadline = Clock::now() + timeout;
    while (got.size() < n && Clock::now() < deadline) {
      ibv_wc wc[16];
      const int k = VerbsApi::pollCq(cq.get(), 16, wc);
      require(k >= 0, "ibv_poll_cq");
      got.insert(got.end(), wc, wc + k);
      if (k == 0) std::this_thread::sleep_for(100us);
    }
    return got;
  }
  // Everything that comes within `d` (to show that nothing does).
  std::vector<ibv_wc> drain(Clock::duration d) { return poll(1u << 20, d); }

  std::shared_ptr<const VerbsLibrary> library;
  QpOptions options;
  Context context;
  ProtectionDomain pd;
  CompletionChannel channel;
  CompletionQueue cq;
  QueuePair qp;
};

// Two connected QPs of this process.
struct Pair {
  explicit Pair(const QpOptions& oa = {}, const QpOptions& ob = {}) : a(oa), b(ob) {
    a.connect(b.address());
    b.connect(a.address());
  }
  Endpoint a;
  Endpoint b;
};

// A buffer with its registration, for one endpoint.
struct Buffer {
  Buffer(Endpoint& e, std::size_t size, int access = kAllAccess) : bytes(size) {
    mr = e.reg(bytes.data(), size, access);
    require(bool(mr), "ibv_reg_mr");
  }
  std::uint8_t* data() { return bytes.data(); }
  std::uint64_t addr() const { return reinterpret_cast<std::uint64_t>(bytes.data()); }
  ibv_sge sge(std::size_t offset, std::size_t length) const {
    return ibv_sge{addr() + offset, static_cast<std::uint32_t>(length), mr->lkey};
  }
  std::vector<std::uint8_t> bytes;
  MemoryRegion mr;  // destroyed before the bytes
};

void fill(std::uint8_t* p, std::size_t n, unsigned seed) {
  for (std::size_t i = 0; i < n; ++i)
    p[i] = static_cast<std::uint8_t>((i * 131 + seed * 7) ^ (i >> 8));
}
bool filled(const std::uint8_t* p, std::size_t n, unsigned seed) {
  for (std::size_t i = 0; i < n; ++i) {
    if (p[i] != static_cast<std::uint8_t>((i * 131 + seed * 7) ^ (i >> 8))) return false;
  }
  return true;
}

// ---- the device and its objects -------------------------------------------------------------

TEST(VerbsEmuDevice, OnePortActiveRoceWithTheChosenAddress) {
  ASSERT_EQ(setenv("COLLX_VERBS_EMU_IP", "127.0.0.1", 1), 0);
  Endpoint e;
  unsetenv("COLLX_VERBS_EMU_IP");
  const VerbsApi& api = e.api();
  ibv_device_attr device{};
  ASSERT_EQ(api.queryDevice(e.context.get(), &device), 0);
  EXPECT_EQ(device.phys_port_cnt, 1);
  EXPECT_GE(device.max_qp_wr, 1024);
  EXPECT_GE(device.max_sge, 4);
  ibv_port_attr port{};
  ASSERT_EQ(api.queryPort(e.context.get(), 1, &port), 0);
  EXPECT_EQ(port.state, IBV_PORT_ACTIVE);
  EXPECT_EQ(port.link_layer, IBV_LINK_LAYER_ETHERNET);
  EXPECT_EQ(port.gid_tbl_len, 1);
  ibv_gid gid{};
  ASSERT_EQ(api.queryGid(e.context.get(), 1, 0, &gid), 0);
  const std::uint8_t expected[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1};
  EXPECT_EQ(std::memcmp(gid.raw, expected, 16), 0);
  EXPECT_NE(api.queryGid(e.context.get(), 1, 1, &gid), 0);
  EXPECT_NE(api.queryGid(e.context.get(), 2, 0, &gid), 0);
  // The QPN holds the listener's port: something accepts there.
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  to.sin_port = htons(static_cast<std::uint16_t>(e.qp->qp_num >> 8));
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to), 0) << strerror(errno);
  ::close(fd);
}

TEST(VerbsEmuDevice, RefusesAWrongAddress) {
  ASSERT_EQ(setenv("COLLX_VERBS_EMU_IP", "not-an-address", 1), 0);
  auto library = loadEmulator();
  DeviceList list(library);
  ASSERT_EQ(list.size(), 1);
  errno = 0;
  ibv_context* context = library->api().openDevice(list[0]);
  unsetenv("COLLX_VERBS_EMU_IP");
  EXPECT_EQ(context, nullptr);
  EXPECT_EQ(errno, EINVAL);
}

TEST(VerbsEmuDevice, ObjectsAreDestroyedInOrder) {
  Endpoint e;
  const VerbsApi& api = e.api();
  std::vector<std::uint8_t> bytes(4096);
  MemoryRegion mr = e.reg(bytes.data(), bytes.size());
  ASSERT_TRUE(mr);
  // A PD with an MR and a QP, a CQ with a QP, a context with everything: EBUSY.
  EXPECT_EQ(e.pd.destroy(), EBUSY);
  EXPECT_EQ(e.cq.destroy(), EBUSY);
  EXPECT_EQ(e.context.destroy(), EBUSY);
  EXPECT_EQ(e.qp.destroy(), 0);
  EXPECT_EQ(e.pd.destroy(), EBUSY);  // the MR
  EXPECT_EQ(mr.destroy(), 0);
  EXPECT_EQ(e.cq.destroy(), 0);
  // A channel with a CQ.
  CompletionChannel channel(e.library, api.createCompChannel(e.context.get()),
                            api.destroyCompChannel, "channel");
  ASSERT_TRUE(channel);
  CompletionQueue cq(e.library, api.createCq(e.context.get(), 8, nullptr, channel.get(), 0),
                     api.destroyCq, "CQ");
  ASSERT_TRUE(cq);
  EXPECT_EQ(channel.destroy(), EBUSY);
  EXPECT_EQ(cq.destroy(), 0);
  EXPECT_EQ(channel.destroy(), 0);
  EXPECT_EQ(e.context.destroy(), EBUSY);  // the PD
  EXPECT_EQ(e.pd.destroy(), 0);
  EXPECT_EQ(e.context.destroy(), 0);
}

TEST(VerbsEmuDevice, CreateArgumentsAreChecked) {
  Endpoint e;
  const VerbsApi& api = e.api();
  errno = 0;
  EXPECT_EQ(api.createCq(e.context.get(), 0, nullptr, nullptr, 0), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(api.createCq(e.context.get(), 8, nullptr, nullptr, 1), nullptr);  // comp vector
  ibv_qp_init_attr init{};
  init.send_cq = e.cq.get();
  init.recv_cq = e.cq.get();
  init.cap.max_send_wr = 4;
  init.cap.max_recv_wr = 4;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  init.qp_type = IBV_QPT_UD;
  errno = 0;
  EXPECT_EQ(api.createQp(e.pd.get(), &init), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_sge = 17;
  errno = 0;
  EXPECT_EQ(api.createQp(e.pd.get(), &init), nullptr);
  EXPECT_EQ(errno, EINVAL);
  init.cap.max_send_sge = 1;
  init.cap.max_inline_data = 4096;
  EXPECT_EQ(api.createQp(e.pd.get(), &init), nullptr);
}

TEST(VerbsEmuDevice, RegistrationChecksMemoryAndAccess) {
  Endpoint e;
  std::vector<std::uint8_t> bytes(4096);
  errno = 0;
  EXPECT_FALSE(e.reg(bytes.data(), bytes.size(), IBV_ACCESS_REMOTE_WRITE));  // no LOCAL_WRITE
  EXPECT_EQ(errno, EINVAL);
  EXPECT_FALSE(e.reg(bytes.data(), 0));
  // Memory that is not mapped cannot be pinned. A page this test unmapped could be mapped again
  // by another thread before the registration (it was, once, under ASan), so the address is one
  // no user mapping can ever hold: the kernel's half of the address space.
  void* page = reinterpret_cast<void*>(~std::uintptr_t{0} << 47);
  errno = 0;
  EXPECT_FALSE(e.reg(page, 4096));
  EXPECT_EQ(errno, EFAULT);
  MemoryRegion mr = e.reg(bytes.data(), bytes.size());
  ASSERT_TRUE(mr);
  EXPECT_NE(mr->lkey, mr->rkey);
  EXPECT_EQ(mr->addr, bytes.data());
  EXPECT_EQ(mr->length, bytes.size());
}

// ---- the QP state machine -------------------------------------------------------------------

std::vector<int> bitsOf(int mask) {
  std::vector<int> bits;
  for (int bit = 1; bit != 0 && bit <= mask; bit <<= 1) {
    if ((mask & bit) && bit != IBV_QP_STATE) bits.push_back(bit);
  }
  return bits;
}

TEST(VerbsEmuStates, EachTransitionNeedsExactlyTheKernelsMasks) {
  Endpoint e;
  const Address self = e.address();
  for (int bit : bitsOf(kInitMask)) {
    EXPECT_EQ(e.toInit(kInitMask & ~bit), EINVAL) << "RESET->INIT without mask bit " << bit;
  }
  EXPECT_EQ(e.toInit(kInitMask | IBV_QP_SQ_PSN), EINVAL);     // not allowed here
  EXPECT_EQ(e.toInit(kInitMask | IBV_QP_CUR_STATE), EINVAL);  // not from RESET
  EXPECT_EQ(e.state(), IBV_QPS_RESET);
  ASSERT_EQ(e.toInit(), 0);
  EXPECT_EQ(e.state(), IBV_QPS_INIT);
  EXPECT_EQ(e.qp->state, IBV_QPS_INIT);

  for (int bit : bitsOf(kRtrMask)) {
    EXPECT_EQ(e.toRtr(self, kRtrMask & ~bit), EINVAL) << "INIT->RTR without mask bit " << bit;
  }
  EXPECT_EQ(e.toRtr(self, kRtrMask | IBV_QP_TIMEOUT), EINVAL);
  EXPECT_EQ(e.toRtr(self, kRtrMask | IBV_QP_SQ_PSN), EINVAL);
  EXPECT_EQ(e.toRtr(self, kRtrMask | IBV_QP_ALT_PATH), EINVAL);  // RoCE: no alternate path
  EXPECT_EQ(e.state(), IBV_QPS_INIT);
  EXPECT_EQ(e.toInit(IBV_QP_STATE | IBV_QP_ACCESS_FLAGS), 0);  // INIT->INIT: all optional
  ASSERT_EQ(e.toRtr(self, kRtrMask | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX), 0);
  EXPECT_EQ(e.state(), IBV_QPS_RTR);

  for (int bit : bitsOf(kRtsMask)) {
    EXPECT_EQ(e.toRts(kRtsMask & ~bit), EINVAL) << "RTR->RTS without mask bit " << bit;
  }
  EXPECT_EQ(e.toRts(kRtsMask | IBV_QP_DEST_QPN), EINVAL);
  EXPECT_EQ(e.toRts(kRtsMask | IBV_QP_PORT), EINVAL);
  ibv_qp_attr rts = e.rtsAttr();
  rts.cur_qp_state = IBV_QPS_INIT;  // CUR_STATE must be the truth
  EXPECT_EQ(e.api().modifyQp(e.qp.get(), &rts, kRtsMask | IBV_QP_CUR_STATE), EINVAL);
  rts.cur_qp_state = IBV_QPS_RTR;
  ASSERT_EQ(e.api().modifyQp(e.qp.get(), &rts, kRtsMask | IBV_QP_CUR_STATE), 0);
  EXPECT_EQ(e.state(), IBV_QPS_RTS);

  // RTS->RTS takes optional attributes only; SQD is not emulated.
  ibv_qp_attr attr{};
  attr.min_rnr_timer = 3;
  EXPECT_EQ(e.api().modifyQp(e.qp.get(), &attr, IBV_QP_MIN_RNR_TIMER), 0);
  attr.timeout = 3;
  EXPECT_EQ(e.api().modifyQp(e.qp.get(), &attr, IBV_QP_TIMEOUT), EINVAL);
  EXPECT_EQ(e.toState(IBV_QPS_SQD), EOPNOTSUPP);

  // What was set reads back.
  ibv_qp_init_attr init{};
  ASSERT_EQ(e.api().queryQp(e.qp.get(), &attr, IBV_QP_STATE, &init), 0);
  EXPECT_EQ(attr.dest_qp_num, self.qpn);
  EXPECT_EQ(attr.rq_psn, e.options.rqPsn);
  EXPECT_EQ(attr.sq_psn, e.options.sqPsn);
  EXPECT_EQ(attr.timeout, e.options.timeout);
  EXPECT_EQ(attr.min_rnr_timer, 3);
  EXPECT_EQ(attr.path_mtu, IBV_MTU_1024);
  EXPECT_EQ(init.cap.max_send_wr, e.options.maxSendWr);
  EXPECT_EQ(init.qp_type, IBV_QPT_RC);
}

TEST(VerbsEmuStates, OnlyTheTableTransitionsExist) {
  Endpoint e;
  const Address self = e.address();
  EXPECT_EQ(e.toRtr(self), EINVAL);  // RESET->RTR
  EXPECT_EQ(e.toRts(), EINVAL);      // RESET->RTS
  ASSERT_EQ(e.toInit(), 0);
  EXPECT_EQ(e.toRts(), EINVAL);  // INIT->RTS
  ASSERT_EQ(e.toRtr(self), 0);
  EXPECT_EQ(e.toInit(), EINVAL);     // RTR->INIT
  EXPECT_EQ(e.toRtr(self), EINVAL);  // RTR->RTR
  ASSERT_EQ(e.toRts(), 0);
  EXPECT_EQ(e.toInit(), EINVAL);     // RTS->INIT
  EXPECT_EQ(e.toRtr(self), EINVAL);  // RTS->RTR
  ASSERT_EQ(e.toState(IBV_QPS_ERR), 0);
  EXPECT_EQ(e.toInit(), EINVAL);  // ERR->INIT
  EXPECT_EQ(e.toRts(), EINVAL);   // ERR->RTS
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  EXPECT_EQ(e.api().modifyQp(e.qp.get(), &attr, IBV_QP_STATE | IBV_QP_PORT), EINVAL);
  ASSERT_EQ(e.toState(IBV_QPS_RESET), 0);
  EXPECT_EQ(e.toInit(), 0);  // a reset QP starts again
}

TEST(VerbsEmuStates, AnyStateGoesToErrorAndToReset) {
  const ibv_qp_state states[] = {IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS,
                                 IBV_QPS_ERR};
  for (ibv_qp_state target : {IBV_QPS_ERR, IBV_QPS_RESET}) {
    for (ibv_qp_state from : states) {
      Endpoint e;
      const Address self = e.address();
      if (from != IBV_QPS_RESET) {
        if (from == IBV_QPS_ERR) {
          ASSERT_EQ(e.toState(IBV_QPS_ERR), 0);
        } else {
          ASSERT_EQ(e.toInit(), 0);
          if (from != IBV_QPS_INIT) {
            ASSERT_EQ(e.toRtr(self), 0);
          }
          if (from == IBV_QPS_RTS) {
            ASSERT_EQ(e.toRts(), 0);
          }
        }
      }
      ASSERT_EQ(e.state(), from);
      EXPECT_EQ(e.toState(target), 0) << from << "->" << target;
      EXPECT_EQ(e.state(), target);
    }
  }
}

TEST(VerbsEmuStates, InfiniBandPortsTakeALidAndNoGrh) {
  ::setenv("COLLX_VERBS_EMU_LINK", "ib", 1);
  struct Unset {
    ~Unset() { ::unsetenv("COLLX_VERBS_EMU_LINK"); }
  } unset;
  Endpoint e;
  ibv_port_attr port{};
  ASSERT_EQ(e.api().queryPort(e.context.get(), 1, &port), 0);
  EXPECT_EQ(port.link_layer, IBV_LINK_LAYER_INFINIBAND);
  EXPECT_NE(port.lid, 0);
  EXPECT_EQ(port.active_mtu, IBV_MTU_4096);
  ibv_gid gid{};
  ASSERT_EQ(e.api().queryGid(e.context.get(), 1, 0, &gid), 0);
  EXPECT_EQ(gid.raw[0], 0xfe);  // link-local: fe80::/64
  EXPECT_EQ(gid.raw[1], 0x80);
  ASSERT_EQ(e.toInit(), 0);
  const Address self = e.address();
  const auto rtr = [&](const std::function<void(ibv_qp_attr&)>& change) {
    ibv_qp_attr a = e.rtrAttr(self);
    a.ah_attr.is_global = 0;
    a.ah_attr.dlid = port.lid;
    change(a);
    return e.api().modifyQp(e.qp.get(), &a, kRtrMask);
  };
  EXPECT_EQ(rtr([](ibv_qp_attr& a) { a.ah_attr.is_global = 1; }), EINVAL);  // no GRH here
  EXPECT_EQ(rtr([](ibv_qp_attr& a) { a.ah_attr.dlid = 0; }), EINVAL);
  EXPECT_EQ(rtr([](ibv_qp_attr& a) { a.ah_attr.dlid = 0xc001; }), EINVAL);  // multicast
  EXPECT_EQ(rtr([](ibv_qp_attr&) {}), 0);
}

TEST(VerbsEmuStates, ValuesAreChecked) {
  Endpoint e;
  const Address self = e.address();
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.port_num = 2;
  EXPECT_EQ(e.api().modifyQp(e.qp.get(), &attr, kInitMask), EINVAL);
  attr.port_num = 1;
  attr.pkey_index = 1;
  EXPECT_EQ(e.api().modifyQp(e.qp.get(), &attr, kInitMask), EINVAL);
  attr.pkey_index = 0;
  attr.qp_access_flags = IBV_ACCESS_ZERO_BASED;
  EXPECT_EQ(e.api().modifyQp(e.qp.get(), &attr, kInitMask), EINVAL);
  ASSERT_EQ(e.toInit(), 0);

  const auto rtr = [&](const std::function<void(ibv_qp_attr&)>& change) {
    ibv_qp_attr a = e.rtrAttr(self);
    change(a);
    return e.api().modifyQp(e.qp.get(), &a, kRtrMask);
  };
  EXPECT_EQ(rtr([](ibv_qp_attr& a) { a.ah_attr.is_global = 0; }), EINVAL);  // RoCE needs a GRH
  EXPECT_EQ(rtr([](ibv_qp_attr& a) { a.ah_attr.grh.sgid_index = 1; }), EINVAL);
  EXPECT_EQ(rtr([](ibv_qp_attr& a) { a.ah_attr.grh.dgid.raw[10] = 0; }), EINVAL);
  EXPECT_EQ(rtr([](ibv_qp_attr& a) { a.path_mtu = static_cast<ibv_mtu>(0); }), EINVAL);
  EXPECT_EQ(rtr([](ibv_qp_attr& a) { a.min_rnr_timer = 32; }), EINVAL);
  EXPECT_EQ(rtr([](ibv_qp_attr& a) { a.max_dest_rd_atomic = 17; }), EINVAL);
  EXPECT_EQ(rtr([](ibv_qp_attr& a) { a.dest_qp_num = 1u << 24; }), EINVAL);
  ASSERT_EQ(e.toRtr(self), 0);

  const auto rts = [&](const std::function<void(ibv_qp_attr&)>& change) {
    ibv_qp_attr a = e.rtsAttr();
    change(a);
    return e.api().modifyQp(e.qp.get(), &a, kRtsMask);
  };
  EXPECT_EQ(rts([](ibv_qp_attr& a) { a.retry_cnt = 8; }), EINVAL);
  EXPECT_EQ(rts([](ibv_qp_attr& a) { a.rnr_retry = 8; }), EINVAL);
  EXPECT_EQ(rts([](ibv_qp_attr& a) { a.timeout = 32; }), EINVAL);
  EXPECT_EQ(rts([](ibv_qp_attr& a) { a.max_rd_atomic = 17; }), EINVAL);
  // PSNs are 24 bits: the kernel masks larger values.
  EXPECT_EQ(rts([](ibv_qp_attr& a) { a.sq_psn = 0x1abcdef; }), 0);
  ibv_qp_init_attr init{};
  ASSERT_EQ(e.api().queryQp(e.qp.get(), &attr, IBV_QP_SQ_PSN, &init), 0);
  EXPECT_EQ(attr.sq_psn, 0xabcdefu);
}

TEST(VerbsEmuStates, PostingInAWrongStateFails) {
  Endpoint a;
  Endpoint b;
  Buffer buffer(a, 256);
  EXPECT_EQ(a.recv(1, {buffer.sge(0, 8)}), EINVAL);  // RESET
  EXPECT_EQ(a.post(IBV_WR_SEND, 1, {buffer.sge(0, 8)}), EINVAL);
  ASSERT_EQ(a.toInit(), 0);
  EXPECT_EQ(a.recv(2, {buffer.sge(0, 8)}), 0);  // receives from INIT on
  EXPECT_EQ(a.post(IBV_WR_SEND, 2, {buffer.sge(0, 8)}), EINVAL);
  ASSERT_EQ(a.toRtr(b.address()), 0);
  EXPECT_EQ(a.post(IBV_WR_SEND, 3, {buffer.sge(0, 8)}), EINVAL);  // sends from RTS on
  EXPECT_TRUE(a.drain(50ms).empty());
}

TEST(VerbsEmuStates, PostArgumentsAreChecked) {
  QpOptions options;
  options.maxSendWr = 2;
  options.maxSge = 2;
  options.maxInline = 16;
  options.rnrRetry = 7;
  Pair p(options, options);
  Buffer buffer(p.a, 256);
  EXPECT_EQ(p.a.post(IBV_WR_SEND, 1, {buffer.sge(0, 1), buffer.sge(1, 1), buffer.sge(2, 1)}),
            EINVAL);  // more SGEs than max_send_sge
  EXPECT_EQ(p.a.post(IBV_WR_SEND, 1, {buffer.sge(0, 17)}, IBV_SEND_INLINE), EINVAL);
  EXPECT_EQ(p.a.post(IBV_WR_RDMA_READ, 1, {buffer.sge(0, 8)}, IBV_SEND_INLINE), EINVAL);
  EXPECT_EQ(p.a.post(IBV_WR_ATOMIC_FETCH_AND_ADD, 1, {buffer.sge(0, 8)}), EINVAL);
  // A list: what comes before the bad request is posted, bad_wr names it.
  ibv_sge s = buffer.sge(0, 8);
  ibv_send_wr wrs[3]{};
  for (int i = 0; i < 3; ++i) {
    wrs[i].wr_id = 10 + i;
    wrs[i].opcode = IBV_WR_SEND;
    wrs[i].sg_list = &s;
    wrs[i].num_sge = 1;
    wrs[i].next = i < 2 ? &wrs[i + 1] : nullptr;
  }
  ibv_send_wr* bad = nullptr;
  // b posted no receive and retries RNR forever: both requests stay outstanding.
  EXPECT_EQ(VerbsApi::postSend(p.a.qp.get(), wrs, &bad), ENOMEM);  // the queue holds 2
  EXPECT_EQ(bad, &wrs[2]);
  Buffer received(p.b, 256);
  ASSERT_EQ(p.b.recv(20, {received.sge(0, 8)}), 0);
  ASSERT_EQ(p.b.recv(21, {received.sge(8, 8)}), 0);
  const auto done = p.a.poll(2);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].wr_id, 10u);
  EXPECT_EQ(done[1].wr_id, 11u);
}

// ---- work -------------------------------------------------------------------------------------

TEST(VerbsEmuWork, SendAndReceive) {
  Pair p;
  Buffer out(p.a, 4096);
  Buffer in(p.b, 4096);
  fill(out.data(), 4096, 1);
  ASSERT_EQ(p.b.recv(7, {in.sge(0, 4096)}), 0);
  ASSERT_EQ(p.b.recv(8, {in.sge(0, 4096)}), 0);
  ASSERT_EQ(p.a.post(IBV_WR_SEND, 5, {out.sge(0, 1000)}), 0);
  auto sent = p.a.poll(1);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].wr_id, 5u);
  EXPECT_EQ(sent[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(sent[0].opcode, IBV_WC_SEND);
  EXPECT_EQ(sent[0].qp_num, p.a.qp->qp_num);
  auto received = p.b.poll(1);
  ASSERT_EQ(received.size(), 1u);
  EXPECT_EQ(received[0].wr_id, 7u);
  EXPECT_EQ(received[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(received[0].opcode, IBV_WC_RECV);
  EXPECT_EQ(received[0].byte_len, 1000u);
  EXPECT_EQ(received[0].qp_num, p.b.qp->qp_num);
  EXPECT_EQ(received[0].src_qp, p.a.qp->qp_num);
  EXPECT_FALSE(received[0].wc_flags & IBV_WC_WITH_IMM);
  EXPECT_TRUE(filled(in.data(), 1000, 1));

  // With an immediate: it arrives as sent (network order, untouched).
  ASSERT_EQ(p.a.post(IBV_WR_SEND_WITH_IMM, 6, {out.sge(0, 10)}, 0, 0, 0, htonl(0xdeadbeef)), 0);
  received = p.b.poll(1);
  ASSERT_EQ(received.size(), 1u);
  EXPECT_EQ(received[0].wr_id, 8u);
  EXPECT_EQ(received[0].opcode, IBV_WC_RECV);
  EXPECT_EQ(received[0].byte_len, 10u);
  EXPECT_TRUE(received[0].wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(ntohl(received[0].imm_data), 0xdeadbeefu);
  EXPECT_EQ(p.a.poll(1).size(), 1u);
}

TEST(VerbsEmuWork, ScatterGather) {
  Pair p;
  Buffer out(p.a, 256);
  Buffer in(p.b, 256);
  fill(out.data(), 256, 2);
  // 10 + 0 + 20 bytes sent, into receive SGEs of 15 and 100.
  ASSERT_EQ(p.b.recv(1, {in.sge(0, 15), in.sge(100, 100)}), 0);
  ASSERT_EQ(p.a.post(IBV_WR_SEND, 1, {out.sge(0, 10), out.sge(10, 0), out.sge(50, 20)}), 0);
  const auto received = p.b.poll(1);
  ASSERT_EQ(received.size(), 1u);
  EXPECT_EQ(received[0].byte_len, 30u);
  std::vector<std::uint8_t> expected(out.data(), out.data() + 10);
  expected.insert(expected.end(), out.data() + 50, out.data() + 70);
  EXPECT_EQ(std::memcmp(in.data(), expected.data(), 15), 0);
  EXPECT_EQ(std::memcmp(in.data() + 100, expected.data() + 15, 15), 0);
}

TEST(VerbsEmuWork, RdmaWriteReadAndWriteWithImmediate) {
  Pair p;
  Buffer local(p.a, 1 << 16);
  Buffer remote(p.b, 1 << 16);
  fill(local.data(), 1 << 16, 3);
  // WRITE: the bytes land, the responder sees no completion.
  ASSERT_EQ(
      p.a.post(IBV_WR_RDMA_WRITE, 1, {local.sge(0, 5000)}, 0, remote.addr() + 100, remote.mr->rkey),
      0);
  auto done = p.a.poll(1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(done[0].opcode, IBV_WC_RDMA_WRITE);
  EXPECT_TRUE(filled(remote.data() + 100, 5000, 3));
  EXPECT_TRUE(p.b.drain(50ms).empty());

  // WRITE WITH IMMEDIATE into an announced buffer, the transfer id in the immediate (as
  // the pair protocol's medium does): a receive without SGEs completes with its length.
  ASSERT_EQ(p.b.recv(40, {}), 0);
  fill(local.data(), 1 << 16, 4);
  ASSERT_EQ(p.a.post(IBV_WR_RDMA_WRITE_WITH_IMM, 2, {local.sge(0, 1 << 16)}, 0, remote.addr(),
                     remote.mr->rkey, htonl(0x00abcdef)),
            0);
  auto received = p.b.poll(1);
  ASSERT_EQ(received.size(), 1u);
  EXPECT_EQ(received[0].wr_id, 40u);
  EXPECT_EQ(received[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(received[0].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_EQ(received[0].byte_len, 1u << 16);
  EXPECT_TRUE(received[0].wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(ntohl(received[0].imm_data), 0x00abcdefu);
  EXPECT_EQ(received[0].src_qp, p.a.qp->qp_num);
  EXPECT_TRUE(filled(remote.data(), 1 << 16, 4));
  ASSERT_EQ(p.a.poll(1).size(), 1u);

  // A zero-length WRITE WITH IMMEDIATE checks no key: a notification.
  ASSERT_EQ(p.b.recv(41, {}), 0);
  ASSERT_EQ(p.a.post(IBV_WR_RDMA_WRITE_WITH_IMM, 3, {}, 0, 0, 0, htonl(7)), 0);
  received = p.b.poll(1);
  ASSERT_EQ(received.size(), 1u);
  EXPECT_EQ(received[0].byte_len, 0u);
  EXPECT_EQ(ntohl(received[0].imm_data), 7u);
  ASSERT_EQ(p.a.poll(1).size(), 1u);

  // READ: the remote bytes come back into two local SGEs.
  fill(remote.data(), 1 << 16, 5);
  std::memset(local.data(), 0, 1 << 16);
  ASSERT_EQ(p.a.post(IBV_WR_RDMA_READ, 4, {local.sge(0, 3000), local.sge(10000, 1000)}, 0,
                     remote.addr() + 7, remote.mr->rkey),
            0);
  done = p.a.poll(1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(done[0].opcode, IBV_WC_RDMA_READ);
  EXPECT_EQ(done[0].byte_len, 4000u);
  EXPECT_EQ(std::memcmp(local.data(), remote.data() + 7, 3000), 0);
  EXPECT_EQ(std::memcmp(local.data() + 10000, remote.data() + 3007, 1000), 0);
  EXPECT_TRUE(p.b.drain(20ms).empty());
}

TEST(VerbsEmuWork, LargeMessages) {
  Pair p;
  constexpr std::size_t kBytes = 8u << 20;
  Buffer local(p.a, kBytes);
  Buffer remote(p.b, kBytes);
  fill(local.data(), kBytes, 6);
  ASSERT_EQ(p.b.recv(1, {}), 0);
  ASSERT_EQ(p.b.recv(2, {remote.sge(0, kBytes)}), 0);
  ASSERT_EQ(p.a.post(IBV_WR_RDMA_WRITE_WITH_IMM, 1, {local.sge(0, kBytes)}, 0, remote.addr(),
                     remote.mr->rkey, 1),
            0);
  auto received = p.b.poll(1);
  ASSERT_EQ(received.size(), 1u);
  EXPECT_EQ(received[0].byte_len, kBytes);
  EXPECT_TRUE(filled(remote.data(), kBytes, 6));
  std::memset(local.data(), 0, kBytes);
  ASSERT_EQ(
      p.a.post(IBV_WR_RDMA_READ, 2, {local.sge(0, kBytes)}, 0, remote.addr(), remote.mr->rkey), 0);
  const auto done = p.a.poll(2);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[1].opcode, IBV_WC_RDMA_READ);
  EXPECT_TRUE(filled(local.data(), kBytes, 6));
  fill(local.data(), 3u << 20, 7);
  ASSERT_EQ(p.a.post(IBV_WR_SEND, 3, {local.sge(0, 3u << 20)}), 0);
  received = p.b.poll(1);
  ASSERT_EQ(received.size(), 1u);
  EXPECT_EQ(received[0].byte_len, 3u << 20);
  EXPECT_TRUE(filled(remote.data(), 3u << 20, 7));
}

TEST(VerbsEmuWork, InOrderPerQp) {
  QpOptions options;
  options.maxSendWr = 512;
  options.maxRecvWr = 512;
  options.cqe = 2048;
  Pair p(options, options);
  constexpr int kOps = 300;
  Buffer out(p.a, kOps * 16);
  Buffer in(p.b, kOps * 16);
  Buffer slots(p.b, kOps * 8);
  for (int i = 0; i < kOps; ++i) {
    ASSERT_EQ(p.b.recv(1000 + i, {in.sge(static_cast<std::size_t>(i) * 16, 16)}), 0);
  }
  // SENDs, WRITEs and WRITEs WITH IMMEDIATE interleaved, each carrying its index.
  for (int i = 0; i < kOps; ++i) {
    std::memcpy(out.data() + i * 16, &i, sizeof i);
    const std::uint64_t slot = slots.addr() + static_cast<std::uint64_t>(i) * 8;
    int rc;
    switch (i % 3) {
      case 0:
        rc = p.a.post(IBV_WR_SEND, i, {out.sge(i * 16, 4)});
        break;
      case 1:
        rc = p.a.post(IBV_WR_RDMA_WRITE, i, {out.sge(i * 16, 4)}, 0, slot, slots.mr->rkey);
        break;
      default:
        rc = p.a.post(IBV_WR_RDMA_WRITE_WITH_IMM, i, {out.sge(i * 16, 4)}, 0, slot, slots.mr->rkey,
                      htonl(static_cast<std::uint32_t>(i)));
    }
    ASSERT_EQ(rc, 0) << i;
  }
  const auto sent = p.a.poll(kOps);
  ASSERT_EQ(sent.size(), static_cast<std::size_t>(kOps));
  for (int i = 0; i < kOps; ++i) {
    EXPECT_EQ(sent[i].wr_id, static_cast<std::uint64_t>(i));
    EXPECT_EQ(sent[i].status, IBV_WC_SUCCESS);
  }
  const auto received = p.b.poll(2 * kOps / 3);
  ASSERT_EQ(received.size(), static_cast<std::size_t>(2 * kOps / 3));
  int expectedRecv = 1000;
  for (std::size_t k = 0; k < received.size(); ++k) {
    const int i = static_cast<int>(k / 2) * 3 + (k % 2 == 0 ? 0 : 2);  // 0, 2, 3, 5, 6, 8, ...
    EXPECT_EQ(received[k].wr_id, static_cast<std::uint64_t>(expectedRecv++));
    if (i % 3 == 0) {
      EXPECT_EQ(received[k].opcode, IBV_WC_RECV);
      int value;
      std::memcpy(&value, in.data() + (received[k].wr_id - 1000) * 16, sizeof value);
      EXPECT_EQ(value, i);
    } else {
      EXPECT_EQ(received[k].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
      EXPECT_EQ(ntohl(received[k].imm_data), static_cast<std::uint32_t>(i));
    }
  }
  for (int i = 0; i < kOps; ++i) {
    if (i % 3 == 0) continue;
    int value;
    std::memcpy(&value, slots.data() + i * 8, sizeof value);
    EXPECT_EQ(value, i);
  }
}

TEST(VerbsEmuWork, InlineSendsNeedNoKeyAndCopyAtPost) {
  Pair p;
  Buffer in(p.b, 64);
  ASSERT_EQ(p.b.recv(1, {in.sge(0, 64)}), 0);
  char message[32] = "inline bytes, copied at post";
  ibv_sge s{reinterpret_cast<std::uint64_t>(message), sizeof message, 0};  // no MR at all
  ASSERT_EQ(p.a.post(IBV_WR_SEND, 1, {s}, IBV_SEND_INLINE), 0);
  std::memset(message, 'x', sizeof message);  // the caller's buffer is free at once
  const auto received = p.b.poll(1);
  ASSERT_EQ(received.size(), 1u);
  EXPECT_EQ(received[0].byte_len, 32u);
  EXPECT_STREQ(reinterpret_cast<const char*>(in.data()), "inline bytes, copied at post");
  EXPECT_EQ(p.a.poll(1).size(), 1u);
}

TEST(VerbsEmuWork, UnsignaledRequestsHoldTheirSlots) {
  QpOptions options;
  options.sigAll = false;
  options.maxSendWr = 4;
  Pair p(options, options);
  Buffer out(p.a, 64);
  Buffer in(p.b, 64 * 16);
  for (int i = 0; i < 16; ++i) ASSERT_EQ(p.b.recv(i, {in.sge(i * 64, 64)}), 0);
  // Three unsignaled and a signaled one: one completion, and the four slots are free again.
  for (int i = 0; i < 3; ++i) ASSERT_EQ(p.a.post(IBV_WR_SEND, i, {out.sge(0, 8)}), 0);
  ASSERT_EQ(p.a.post(IBV_WR_SEND, 3, {out.sge(0, 8)}, IBV_SEND_SIGNALED), 0);
  auto done = p.a.poll(1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].wr_id, 3u);
  EXPECT_EQ(p.b.poll(4).size(), 4u);
  // Four unsignaled: they complete at the peer, yet hold the queue (as on hardware).
  for (int i = 4; i < 8; ++i) ASSERT_EQ(p.a.post(IBV_WR_SEND, i, {out.sge(0, 8)}), 0);
  EXPECT_EQ(p.b.poll(4).size(), 4u);
  EXPECT_EQ(p.a.post(IBV_WR_SEND, 8, {out.sge(0, 8)}, IBV_SEND_SIGNALED), ENOMEM);
  EXPECT_TRUE(p.a.drain(50ms).empty());
}

// ---- protection -----------------------------------------------------------------------------

// A requester's error: the failing request's status, everything after it flushed, both QPs in
// the error state, the responder's receives flushed.
void expectRemoteError(Pair& p, ibv_wc_status status) {
  const auto done = p.a.poll(2);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].wr_id, 1u);
  EXPECT_EQ(done[0].status, status) << statusText(done[0]);
  EXPECT_EQ(done[1].wr_id, 2u);
  EXPECT_EQ(done[1].status, IBV_WC_WR_FLUSH_ERR) << statusText(done[1]);
  EXPECT_EQ(p.a.state(), IBV_QPS_ERR);
  const auto flushed = p.b.poll(1);
  ASSERT_EQ(flushed.size(), 1u);
  EXPECT_EQ(flushed[0].wr_id, 99u);
  EXPECT_EQ(flushed[0].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(flushed[0].opcode, IBV_WC_RECV);
  EXPECT_EQ(p.b.state(), IBV_QPS_ERR);
  // Later work flushes at once.
  Buffer more(p.a, 8);
  ASSERT_EQ(p.a.post(IBV_WR_SEND, 3, {more.sge(0, 8)}), 0);
  const auto later = p.a.poll(1);
  ASSERT_EQ(later.size(), 1u);
  EXPECT_EQ(later[0].status, IBV_WC_WR_FLUSH_ERR);
}

// Posts request 1 (a WRITE of `length` bytes to `remote` with `rkey`) and a good SEND 2; the
// responder has receive 99 posted.
void writeThenSend(Pair& p, Buffer& local, std::uint64_t remote, std::uint32_t rkey,
                   std::size_t length, Buffer& in, ibv_wr_opcode opcode = IBV_WR_RDMA_WRITE) {
  ASSERT_EQ(p.b.recv(99, {in.sge(0, 8)}), 0);
  ASSERT_EQ(p.a.post(opcode, 1, {local.sge(0, length)}, 0, remote, rkey), 0);
  ASSERT_EQ(p.a.post(IBV_WR_SEND, 2, {local.sge(0, 8)}), 0);
}

TEST(VerbsEmuProtection, BadRkey) {
  Pair p;
  Buffer local(p.a, 4096);
  Buffer remote(p.b, 4096);
  writeThenSend(p, local, remote.addr(), remote.mr->rkey + 0x100, 64, remote);
  expectRemoteError(p, IBV_WC_REM_ACCESS_ERR);
}

TEST(VerbsEmuProtection, LkeyIsNoRkey) {
  Pair p;
  Buffer local(p.a, 4096);
  Buffer remote(p.b, 4096);
  writeThenSend(p, local, remote.addr(), remote.mr->lkey, 64, remote);
  expectRemoteError(p, IBV_WC_REM_ACCESS_ERR);
}

TEST(VerbsEmuProtection, OutOfBounds) {
  {
    Pair p;
    Buffer local(p.a, 4096);
    Buffer remote(p.b, 4096);
    writeThenSend(p, local, remote.addr() + 4096 - 10, remote.mr->rkey, 11, remote);
    expectRemoteError(p, IBV_WC_REM_ACCESS_ERR);
  }
  {
    Pair p;
    Buffer local(p.a, 4096);
    Buffer remote(p.b, 4096);
    writeThenSend(p, local, remote.addr() - 1, remote.mr->rkey, 8, remote);
    expectRemoteError(p, IBV_WC_REM_ACCESS_ERR);
  }
  {
    // The last bytes exactly: fine.
    Pair p;
    Buffer local(p.a, 4096);
    Buffer remote(p.b, 4096);
    fill(local.data(), 10, 8);
    ASSERT_EQ(p.a.post(IBV_WR_RDMA_WRITE, 1, {local.sge(0, 10)}, 0, remote.addr() + 4086,
                       remote.mr->rkey),
              0);
    const auto done = p.a.poll(1);
    ASSERT_EQ(done.size(), 1u);
    EXPECT_EQ(done[0].status, IBV_WC_SUCCESS);
    EXPECT_TRUE(filled(remote.data() + 4086, 10, 8));
  }
}

TEST(VerbsEmuProtection, RegionAccessFlags) {
  {
    Pair p;
    Buffer local(p.a, 4096);
    Buffer remote(p.b, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
    writeThenSend(p, local, remote.addr(), remote.mr->rkey, 64, remote);
    expectRemoteError(p, IBV_WC_REM_ACCESS_ERR);
  }
  {
    Pair p;
    Buffer local(p.a, 4096);
    Buffer remote(p.b, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    writeThenSend(p, local, remote.addr(), remote.mr->rkey, 64, remote, IBV_WR_RDMA_READ);
    expectRemoteError(p, IBV_WC_REM_ACCESS_ERR);
  }
}

TEST(VerbsEmuProtection, QueuePairAccessFlags) {
  QpOptions responder;
  responder.access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ;  // no remote write
  Pair p({}, responder);
  Buffer local(p.a, 4096);
  Buffer remote(p.b, 4096);
  writeThenSend(p, local, remote.addr(), remote.mr->rkey, 64, remote);
  expectRemoteError(p, IBV_WC_REM_ACCESS_ERR);
}

TEST(VerbsEmuProtection, AnotherProtectionDomainsRegion) {
  Pair p;
  Endpoint other;  // the same device, another PD
  Buffer local(p.a, 4096);
  Buffer foreign(other, 4096);
  Buffer in(p.b, 64);
  writeThenSend(p, local, foreign.addr(), foreign.mr->rkey, 64, in);
  expectRemoteError(p, IBV_WC_REM_ACCESS_ERR);
}

TEST(VerbsEmuProtection, DeregistrationInvalidatesAtOnce) {
  Pair p;
  Buffer local(p.a, 4096);
  Buffer remote(p.b, 4096);
  const std::uint32_t rkey = remote.mr->rkey;
  ASSERT_EQ(p.a.post(IBV_WR_RDMA_WRITE, 7, {local.sge(0, 64)}, 0, remote.addr(), rkey), 0);
  ASSERT_EQ(p.a.poll(1).size(), 1u);  // the key worked
  ASSERT_EQ(remote.mr.destroy(), 0);
  MemoryRegion again = p.b.reg(remote.data(), 4096);  // the same memory, a new key
  ASSERT_TRUE(again);
  EXPECT_NE(again->rkey, rkey);
  Buffer in(p.b, 64);
  writeThenSend(p, local, remote.addr(), rkey, 64, in);
  expectRemoteError(p, IBV_WC_REM_ACCESS_ERR);
}

// Whether /proc/self/pagemap shows this process its physical frames (it does to a root
// process): the device's stale registration check needs them (README: "Stale registrations").
bool framesVisible() {
  static const bool visible = [] {
    const int fd = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    static volatile std::uint64_t touched = 1;
    const auto page = reinterpret_cast<std::uintptr_t>(&touched) / sysconf(_SC_PAGESIZE);
    std::uint64_t entry = 0;
    const bool read = pread(fd, &entry, sizeof entry, static_cast<off_t>(page * 8)) == 8;
    ::close(fd);
    return read && (entry >> 63) && (entry & ((std::uint64_t{1} << 55) - 1)) != 0;
  }();
  return visible;
}

// The physical frame behind `p` (0: not shown).
std::uint64_t frameOf(const void* p) {
  const int fd = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  const auto page = reinterpret_cast<std::uintptr_t>(p) / sysconf(_SC_PAGESIZE);
  std::uint64_t entry = 0;
  const bool read = pread(fd, &entry, sizeof entry, static_cast<off_t>(page * 8)) == 8;
  ::close(fd);
  return read && (entry >> 63) ? entry & ((std::uint64_t{1} << 55) - 1) : 0;
}

// Memory registered, then unmapped and mapped again at the same address (or its pages
// dropped): a NIC would still access the old pages it pinned, so the device refuses the
// access instead, as an error completion, and says so on stderr.
TEST(VerbsEmuProtection, StaleRegistrationIsAnError) {
  if (!framesVisible()) {
    GTEST_SKIP() << "/proc/self/pagemap shows no physical frames here (not root): the device's "
                    "stale registration check is off";
  }
  const std::size_t kBytes = 2 * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  enum class Change { kMappedAgain, kDropped };
  for (const bool remote : {false, true}) {
    for (const Change change : {Change::kMappedAgain, Change::kDropped}) {
      SCOPED_TRACE(std::string(remote ? "an RDMA WRITE into it" : "a SEND out of it") +
                   (change == Change::kMappedAgain ? ", mapped again" : ", MADV_DONTNEED"));
      Pair p;
      Buffer local(p.a, 4096);
      Buffer in(p.b, 64);
      auto* mem = static_cast<std::uint8_t*>(
          mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
      ASSERT_NE(mem, MAP_FAILED);
      std::memset(mem, 1, kBytes);
      MemoryRegion mr = (remote ? p.b : p.a).reg(mem, kBytes);
      ASSERT_TRUE(mr);
      const std::uint64_t registered = frameOf(mem);
      // New pages, not the registered ones: the kernel hands a frame just freed out again
      // first, so a hog takes those before the new pages are touched (without it, the new
      // page was the old frame in some loaded runs, and nothing was stale).
      std::vector<std::vector<std::uint8_t>> hogs;
      for (int attempt = 0; attempt < 8; ++attempt) {
        if (change == Change::kMappedAgain) {
          ASSERT_EQ(munmap(mem, kBytes), 0);
          ASSERT_EQ(mmap(mem, kBytes, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0),
                    mem);
        } else {
          ASSERT_EQ(madvise(mem, kBytes, MADV_DONTNEED), 0);
        }
        hogs.emplace_back(16 * kBytes, std::uint8_t{3});
        std::memset(mem, 2, kBytes);
        if (frameOf(mem) != registered) break;
      }
      ASSERT_NE(frameOf(mem), registered) << "the new page kept the registered frame";
      testing::internal::CaptureStderr();
      if (remote) {
        writeThenSend(p, local, reinterpret_cast<std::uintptr_t>(mem) + 8, mr->rkey, 64, in);
        expectRemoteError(p, IBV_WC_REM_ACCESS_ERR);
      } else {
        ASSERT_EQ(p.b.recv(99, {in.sge(0, 64)}), 0);
        const ibv_sge sge{reinterpret_cast<std::uintptr_t>(mem), 64, mr->lkey};
        ASSERT_EQ(p.a.post(IBV_WR_SEND, 1, {sge}), 0);
        const auto done = p.a.poll(1);
        ASSERT_EQ(done.size(), 1u);
        EXPECT_EQ(done[0].status, IBV_WC_LOC_PROT_ERR) << statusText(done[0]);
        EXPECT_EQ(p.a.state(), IBV_QPS_ERR);
      }
      const std::string said = testing::internal::GetCapturedStderr();
      EXPECT_NE(said.find("stale memory registration"), std::string::npos) << said;
      EXPECT_EQ(mem[8], 2);  // nothing was written into the new pages
      mr = MemoryRegion();
      ASSERT_EQ(munmap(mem, kBytes), 0);
    }
  }
}

TEST(VerbsEmuProtection, LocalKeysAtTheRequester) {
  {
    // A SEND out of memory that is not registered under that lkey.
    Pair p;
    Buffer local(p.a, 4096);
    Buffer in(p.b, 64);
    ASSERT_EQ(p.b.recv(99, {in.sge(0, 8)}), 0);
    ibv_sge bad = local.sge(0, 8);
    bad.lkey += 0x100;
    ASSERT_EQ(p.a.post(IBV_WR_SEND, 1, {bad}), 0);
    ASSERT_EQ(p.a.post(IBV_WR_SEND, 2, {local.sge(0, 8)}), 0);
    const auto done = p.a.poll(2);
    ASSERT_EQ(done.size(), 2u);
    EXPECT_EQ(done[0].status, IBV_WC_LOC_PROT_ERR) << statusText(done[0]);
    EXPECT_EQ(done[1].status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(p.a.state(), IBV_QPS_ERR);
    EXPECT_TRUE(p.b.drain(50ms).empty());  // nothing reached the responder
  }
  {
    // A READ into a region without local write.
    Pair p;
    Buffer local(p.a, 4096, IBV_ACCESS_REMOTE_READ);
    Buffer remote(p.b, 4096);
    ASSERT_EQ(p.a.post(IBV_WR_RDMA_READ, 1, {local.sge(0, 64)}, 0, remote.addr(), remote.mr->rkey),
              0);
    const auto done = p.a.poll(1);
    ASSERT_EQ(done.size(), 1u);
    EXPECT_EQ(done[0].status, IBV_WC_LOC_PROT_ERR) << statusText(done[0]);
    EXPECT_EQ(p.a.state(), IBV_QPS_ERR);
  }
}

TEST(VerbsEmuProtection, ReceiveTooSmallOrBadKey) {
  {
    Pair p;
    Buffer local(p.a, 4096);
    Buffer in(p.b, 4096);
    ASSERT_EQ(p.b.recv(50, {in.sge(0, 10)}), 0);
    ASSERT_EQ(p.b.recv(51, {in.sge(0, 10)}), 0);
    ASSERT_EQ(p.a.post(IBV_WR_SEND, 1, {local.sge(0, 20)}), 0);
    const auto done = p.a.poll(1);
    ASSERT_EQ(done.size(), 1u);
    EXPECT_EQ(done[0].status, IBV_WC_REM_INV_REQ_ERR) << statusText(done[0]);
    const auto received = p.b.poll(2);
    ASSERT_EQ(received.size(), 2u);
    EXPECT_EQ(received[0].wr_id, 50u);
    EXPECT_EQ(received[0].status, IBV_WC_LOC_LEN_ERR) << statusText(received[0]);
    EXPECT_EQ(received[1].status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(p.b.state(), IBV_QPS_ERR);
  }
  {
    Pair p;
    Buffer local(p.a, 4096);
    Buffer in(p.b, 4096);
    ibv_sge bad = in.sge(0, 64);
    bad.lkey ^= 0x300;
    ASSERT_EQ(p.b.recv(50, {bad}), 0);
    ASSERT_EQ(p.a.post(IBV_WR_SEND, 1, {local.sge(0, 20)}), 0);
    const auto done = p.a.poll(1);
    ASSERT_EQ(done.size(), 1u);
    EXPECT_EQ(done[0].status, IBV_WC_REM_OP_ERR) << statusText(done[0]);
    const auto received = p.b.poll(1);
    ASSERT_EQ(received.size(), 1u);
    EXPECT_EQ(received[0].status, IBV_WC_LOC_PROT_ERR) << statusText(received[0]);
  }
}

TEST(VerbsEmuProtection, ReadToAQpThatTakesNoReads) {
  QpOptions responder;
  responder.maxDestRdAtomic = 0;
  Pair p({}, responder);
  Buffer local(p.a, 4096);
  Buffer remote(p.b, 4096);
  writeThenSend(p, local, remote.addr(), remote.mr->rkey, 64, remote, IBV_WR_RDMA_READ);
  expectRemoteError(p, IBV_WC_REM_INV_REQ_ERR);
}

// ---- RNR --------------------------------------------------------------------------------------

TEST(VerbsEmuRnr, RetriesThenFails) {
  for (ibv_wr_opcode opcode : {IBV_WR_SEND, IBV_WR_RDMA_WRITE_WITH_IMM}) {
    QpOptions requester;
    requester.rnrRetry = 3;
    QpOptions responder;
    responder.minRnrTimer = 18;  // 5.12 ms between tries
    Pair p(requester, responder);
    Buffer local(p.a, 64);
    Buffer remote(p.b, 64);
    const auto start = Clock::now();
    ASSERT_EQ(p.a.post(opcode, 1, {local.sge(0, 8)}, 0, remote.addr(), remote.mr->rkey), 0);
    ASSERT_EQ(p.a.post(IBV_WR_SEND, 2, {local.sge(0, 8)}), 0);
    const auto done = p.a.poll(2);
    const auto elapsed = Clock::now() - start;
    ASSERT_EQ(done.size(), 2u);
    EXPECT_EQ(done[0].status, IBV_WC_RNR_RETRY_EXC_ERR) << statusText(done[0]);
    EXPECT_EQ(done[1].status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_GE(elapsed, 3 * 5120us);  // three delays before giving up
    EXPECT_EQ(p.a.state(), IBV_QPS_ERR);
    EXPECT_EQ(p.b.state(), IBV_QPS_RTS);  // the responder did nothing wrong
  }
}

TEST(VerbsEmuRnr, SevenRetriesForever) {
  QpOptions responder;
  responder.minRnrTimer = 1;  // 10 us: many retries in the wait below
  Pair p({}, responder);
  Buffer local(p.a, 64);
  Buffer in(p.b, 64);
  local.data()[0] = 'A';
  local.data()[1] = 'B';
  ASSERT_EQ(p.a.post(IBV_WR_SEND, 1, {local.sge(0, 1)}), 0);
  ASSERT_EQ(p.a.post(IBV_WR_SEND, 2, {local.sge(1, 1)}), 0);
  EXPECT_TRUE(p.a.drain(300ms).empty());
  ASSERT_EQ(p.b.recv(10, {in.sge(0, 1)}), 0);
  ASSERT_EQ(p.b.recv(11, {in.sge(1, 1)}), 0);
  const auto done = p.a.poll(2);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].wr_id, 1u);
  EXPECT_EQ(done[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(done[1].wr_id, 2u);
  const auto received = p.b.poll(2);
  ASSERT_EQ(received.size(), 2u);
  EXPECT_EQ(in.data()[0], 'A');  // in order, each once
  EXPECT_EQ(in.data()[1], 'B');
}

TEST(VerbsEmuRnr, ReceivePostedWithinTheBudget) {
  QpOptions requester;
  requester.rnrRetry = 6;
  QpOptions responder;
  responder.minRnrTimer = 24;  // 40.96 ms: 245 ms of budget
  Pair p(requester, responder);
  Buffer local(p.a, 64);
  Buffer in(p.b, 64);
  ASSERT_EQ(p.a.post(IBV_WR_SEND, 1, {local.sge(0, 8)}), 0);
  std::this_thread::sleep_for(20ms);
  ASSERT_EQ(p.b.recv(10, {in.sge(0, 8)}), 0);
  const auto done = p.a.poll(1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status, IBV_WC_SUCCESS) << statusText(done[0]);
}

// ---- completion channels ----------------------------------------------------------------------

bool readable(int fd, std::chrono::milliseconds timeout) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, static_cast<int>(timeout.count())) == 1;
}

TEST(VerbsEmuChannel, WakesAfterArmingOnce) {
  QpOptions options;
  options.channel = true;
  Pair p({}, options);
  Buffer local(p.a, 64);
  Buffer in(p.b, 64 * 8);
  for (int i = 0; i < 8; ++i) ASSERT_EQ(p.b.recv(i, {in.sge(i * 64, 64)}), 0);
  const int fd = p.b.channel->fd;
  // Not armed: a completion makes no event.
  ASSERT_EQ(p.a.post(IBV_WR_SEND, 1, {local.sge(0, 8)}), 0);
  ASSERT_EQ(p.b.poll(1).size(), 1u);
  EXPECT_FALSE(readable(fd, 50ms));
  // Armed: the next completion does, once.
  ASSERT_EQ(VerbsApi::reqNotifyCq(p.b.cq.get(), false), 0);
  ASSERT_EQ(p.a.post(IBV_WR_SEND, 2, {local.sge(0, 8)}), 0);
  ASSERT_TRUE(readable(fd, 10000ms));
  ibv_cq* cq = nullptr;
  void* cqContext = nullptr;
  ASSERT_EQ(p.b.api().getCqEvent(p.b.channel.get(), &cq, &cqContext), 0);
  EXPECT_EQ(cq, p.b.cq.get());
  EXPECT_EQ(cqContext, &p.b);  // the cq_context given to ibv_create_cq
  p.b.api().ackCqEvents(cq, 1);
  EXPECT_FALSE(readable(fd, 0ms));
  ASSERT_EQ(p.a.post(IBV_WR_SEND, 3, {local.sge(0, 8)}), 0);
  EXPECT_EQ(p.b.poll(2).size(), 2u);
  EXPECT_FALSE(readable(fd, 50ms));  // no second event without arming again
  // Entries already in the CQ do not count: arm, then only a new one wakes.
  ASSERT_EQ(p.a.post(IBV_WR_SEND, 4, {local.sge(0, 8)}), 0);
  std::this_thread::sleep_for(50ms);
  ASSERT_EQ(VerbsApi::reqNotifyCq(p.b.cq.get(), false), 0);
  EXPECT_FALSE(readable(fd, 50ms));
  ASSERT_EQ(p.a.post(IBV_WR_SEND, 5, {local.sge(0, 8)}), 0);
  EXPECT_TRUE(readable(fd, 10000ms));
  ASSERT_EQ(p.b.api().getCqEvent(p.b.channel.get(), &cq, &cqContext), 0);
  p.b.api().ackCqEvents(cq, 1);
  EXPECT_EQ(p.b.poll(2).size(), 2u);
}

TEST(VerbsEmuChannel, SolicitedOnly) {
  QpOptions options;
  options.channel = true;
  Pair p({}, options);
  Buffer local(p.a, 64);
  Buffer in(p.b, 64 * 4);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(p.b.recv(i, {in.sge(i * 64, 64)}), 0);
  const int fd = p.b.channel->fd;
  ASSERT_EQ(VerbsApi::reqNotifyCq(p.b.cq.get(), true), 0);
  ASSERT_EQ(p.a.post(IBV_WR_SEND, 1, {local.sge(0, 8)}), 0);
  ASSERT_EQ(p.b.poll(1).size(), 1u);
  EXPECT_FALSE(readable(fd, 50ms));  // not solicited
  ASSERT_EQ(p.a.post(IBV_WR_SEND, 2, {local.sge(0, 8)}, IBV_SEND_SOLICITED), 0);
  EXPECT_TRUE(readable(fd, 10000ms));
  ibv_cq* cq = nullptr;
  void* cqContext = nullptr;
  ASSERT_EQ(p.b.api().getCqEvent(p.b.channel.get(), &cq, &cqContext), 0);
  p.b.api().ackCqEvents(cq, 1);
  // An error completion wakes a solicited-only sleeper too.
  ASSERT_EQ(VerbsApi::reqNotifyCq(p.b.cq.get(), true), 0);
  ASSERT_EQ(p.b.toState(IBV_QPS_ERR), 0);  // the posted receives flush
  EXPECT_TRUE(readable(fd, 10000ms));
  ASSERT_EQ(p.b.api().getCqEvent(p.b.channel.get(), &cq, &cqContext), 0);
  p.b.api().ackCqEvents(cq, 1);
}

TEST(VerbsEmuChannel, NonBlockingAndUnacknowledgedEvents) {
  QpOptions options;
  options.channel = true;
  Endpoint e(options);
  const int fd = e.channel->fd;
  ASSERT_EQ(fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK), 0);
  ibv_cq* cq = nullptr;
  void* cqContext = nullptr;
  errno = 0;
  EXPECT_EQ(e.api().getCqEvent(e.channel.get(), &cq, &cqContext), -1);
  EXPECT_EQ(errno, EAGAIN);
  // An event taken and not acknowledged: the CQ cannot be destroyed (libibverbs would wait).
  Buffer buffer(e, 64);
  ASSERT_EQ(e.toInit(), 0);
  ASSERT_EQ(e.recv(1, {buffer.sge(0, 8)}), 0);
  ASSERT_EQ(VerbsApi::reqNotifyCq(e.cq.get(), false), 0);
  ASSERT_EQ(e.toState(IBV_QPS_ERR), 0);
  ASSERT_TRUE(readable(fd, 10000ms));
  ASSERT_EQ(e.api().getCqEvent(e.channel.get(), &cq, &cqContext), 0);
  ASSERT_EQ(e.qp.destroy(), 0);
  EXPECT_EQ(e.cq.destroy(), EBUSY);
  e.api().ackCqEvents(cq, 1);
  EXPECT_EQ(e.cq.destroy(), 0);
}

// ---- errors flush, destruction, overrun -------------------------------------------------------

TEST(VerbsEmuFlush, ErrorStateFlushesEverythingInOrder) {
  QpOptions requester;
  requester.sigAll = false;  // flushed requests complete even unsignaled
  Pair p(requester, {});
  Buffer local(p.a, 64);
  Buffer in(p.b, 64);
  // b posts no receive: the SENDs wait (RNR forever) until a's QP goes to the error state.
  for (int i = 1; i <= 3; ++i) ASSERT_EQ(p.a.post(IBV_WR_SEND, i, {local.sge(0, 8)}), 0);
  EXPECT_TRUE(p.a.drain(50ms).empty());
  ASSERT_EQ(p.a.toState(IBV_QPS_ERR), 0);
  auto done = p.a.poll(3);
  ASSERT_EQ(done.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(done[i].wr_id, static_cast<std::uint64_t>(i + 1));
    EXPECT_EQ(done[i].status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(done[i].qp_num, p.a.qp->qp_num);
  }
  // Work posted to a QP in the error state flushes at once, receives too.
  ASSERT_EQ(p.a.recv(7, {local.sge(0, 8)}), 0);
  done = p.a.poll(1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].wr_id, 7u);
  EXPECT_EQ(done[0].status, IBV_WC_WR_FLUSH_ERR);
  // b's receives flush when b goes to the error state.
  for (int i = 20; i < 23; ++i) ASSERT_EQ(p.b.recv(i, {in.sge(0, 8)}), 0);
  ASSERT_EQ(p.b.toState(IBV_QPS_ERR), 0);
  done = p.b.poll(3);
  ASSERT_EQ(done.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(done[i].wr_id, static_cast<std::uint64_t>(20 + i));
    EXPECT_EQ(done[i].status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(done[i].opcode, IBV_WC_RECV);
  }
  // RESET drops without completions.
  ASSERT_EQ(p.b.toState(IBV_QPS_RESET), 0);
  ASSERT_EQ(p.b.toInit(), 0);
  ASSERT_EQ(p.b.recv(30, {in.sge(0, 8)}), 0);
  ASSERT_EQ(p.b.toState(IBV_QPS_RESET), 0);
  EXPECT_TRUE(p.b.drain(50ms).empty());
}

TEST(VerbsEmuFlush, DestroyingAQpWithWorkOutstanding) {
  Pair p;
  Buffer local(p.a, 64);
  Buffer in(p.b, 64);
  ASSERT_EQ(p.b.recv(1, {in.sge(0, 8)}), 0);
  ASSERT_EQ(p.a.post(IBV_WR_SEND, 1, {local.sge(0, 8)}), 0);
  ASSERT_EQ(p.b.poll(1).size(), 1u);
  std::this_thread::sleep_for(50ms);  // a's completion sits in a's CQ, not polled
  ASSERT_EQ(p.a.post(IBV_WR_SEND, 2, {local.sge(0, 8)}), 0);  // waits: no receive (RNR)
  ASSERT_EQ(p.a.post(IBV_WR_SEND, 3, {local.sge(0, 8)}), 0);
  EXPECT_EQ(p.a.qp.destroy(), 0);
  // The destroyed QP's completions are gone from its CQ, and no more come.
  EXPECT_TRUE(p.a.drain(100ms).empty());
  ASSERT_EQ(p.b.recv(2, {in.sge(0, 8)}), 0);
  EXPECT_TRUE(p.b.drain(100ms).empty());  // a's QP is gone: nothing arrives
}

TEST(VerbsEmuFlush, CqOverrunBreaksTheCq) {
  QpOptions options;
  options.cqe = 2;
  Pair p(options, options);
  Buffer local(p.a, 64);
  Buffer in(p.b, 64);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(p.b.recv(i, {in.sge(0, 8)}), 0);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(p.a.post(IBV_WR_SEND, i, {local.sge(0, 8)}), 0);
  std::this_thread::sleep_for(200ms);
  ibv_wc wc[4];
  EXPECT_LT(VerbsApi::pollCq(p.b.cq.get(), 4, wc), 0);
  EXPECT_LT(VerbsApi::pollCq(p.a.cq.get(), 4, wc), 0);
}

// ---- reaching the peer --------------------------------------------------------------------------

TEST(VerbsEmuReach, PeerNotYetReadyIsRetried) {
  QpOptions requester;
  requester.timeout = 16;  // 268 ms x 8 tries
  Endpoint a(requester);
  Endpoint b;
  a.connect(b.address());
  ASSERT_EQ(b.toInit(), 0);
  Buffer local(a, 64);
  Buffer in(b, 64);
  ASSERT_EQ(b.recv(1, {in.sge(0, 8)}), 0);
  ASSERT_EQ(a.post(IBV_WR_SEND, 1, {local.sge(0, 8)}), 0);  // b is not in RTR: dropped
  EXPECT_TRUE(a.drain(100ms).empty());
  ASSERT_EQ(b.toRtr(a.address()), 0);
  const auto done = a.poll(1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status, IBV_WC_SUCCESS) << statusText(done[0]);
  EXPECT_EQ(b.poll(1).size(), 1u);
}

// A requester that can never reach its responder gives up after its timeout and retries.
void expectRetryExceeded(Endpoint& a, std::chrono::nanoseconds atLeast) {
  Buffer local(a, 64);
  const auto start = Clock::now();
  ASSERT_EQ(a.post(IBV_WR_SEND, 1, {local.sge(0, 8)}), 0);
  ASSERT_EQ(a.post(IBV_WR_SEND, 2, {local.sge(0, 8)}), 0);
  const auto done = a.poll(2);
  const auto elapsed = Clock::now() - start;
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].status, IBV_WC_RETRY_EXC_ERR) << statusText(done[0]);
  EXPECT_EQ(done[1].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_GE(elapsed, atLeast);
  EXPECT_LT(elapsed, 15s);
  EXPECT_EQ(a.state(), IBV_QPS_ERR);
}

// The period of an ack timeout `t`: 4.096 us * 2^t.
std::chrono::nanoseconds ackTimeoutOf(int t) { return std::chrono::nanoseconds(4096ll << t); }

QpOptions quickRetries() {
  QpOptions o;
  o.timeout = 12;  // 16.8 ms
  o.retryCnt = 3;  // 4 periods: 67 ms
  return o;
}

TEST(VerbsEmuReach, PeerNeverReady) {
  Endpoint a(quickRetries());
  Endpoint b;
  a.connect(b.address());
  ASSERT_EQ(b.toInit(), 0);
  expectRetryExceeded(a, 4 * ackTimeoutOf(12));
}

TEST(VerbsEmuReach, WrongPeerOrPsnIsUnreachable) {
  {
    // b expects another QP: a's packets are not for it.
    Endpoint a(quickRetries());
    Endpoint b;
    Endpoint c;
    a.connect(b.address());
    b.connect(c.address());
    expectRetryExceeded(a, 4 * ackTimeoutOf(12));
  }
  {
    // a starts at a PSN ahead of what b expects.
    QpOptions requester = quickRetries();
    requester.sqPsn = 500;
    QpOptions responder;
    responder.rqPsn = 400;
    Endpoint a(requester);
    Endpoint b(responder);
    a.connect(b.address());
    b.connect(a.address());
    expectRetryExceeded(a, 4 * ackTimeoutOf(12));
  }
}

TEST(VerbsEmuReach, PsnBehindIsTakenForDuplicates) {
  // As on hardware: requests below the expected PSN are answered and not executed.
  QpOptions requester;
  requester.sqPsn = 399;
  QpOptions responder;
  responder.rqPsn = 400;
  Pair p(requester, responder);
  Buffer local(p.a, 64);
  Buffer in(p.b, 64);
  ASSERT_EQ(p.b.recv(1, {in.sge(0, 8)}), 0);
  local.data()[0] = 'X';
  local.data()[1] = 'Y';
  ASSERT_EQ(p.a.post(IBV_WR_SEND, 1, {local.sge(0, 1)}), 0);  // PSN 399: a "duplicate"
  ASSERT_EQ(p.a.post(IBV_WR_SEND, 2, {local.sge(1, 1)}), 0);  // PSN 400: delivered
  const auto done = p.a.poll(2);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(done[1].status, IBV_WC_SUCCESS);
  const auto received = p.b.poll(1);
  ASSERT_EQ(received.size(), 1u);
  EXPECT_EQ(in.data()[0], 'Y');
  EXPECT_TRUE(p.b.drain(50ms).empty());
}

// ---- processes ----------------------------------------------------------------------------

// Both directions of a pipe pair between the test and a forked child.
class Link {
 public:
  Link() = default;
  Link(int in, int out) : in_(in), out_(out) {}
  Link(Link&& other) noexcept { *this = std::move(other); }
  Link& operator=(Link&& other) noexcept {
    std::swap(in_, other.in_);
    std::swap(out_, other.out_);
    return *this;
  }
  ~Link() {
    if (in_ >= 0) ::close(in_);
    if (out_ >= 0) ::close(out_);
  }

  template <typename T>
  void put(const T& value) {
    const auto* p = reinterpret_cast<const char*>(&value);
    std::size_t left = sizeof value;
    while (left > 0) {
      const ssize_t n = ::write(out_, p, left);
      require(n > 0 || errno == EINTR, "writing to the other process");
      if (n > 0) {
        p += n;
        left -= static_cast<std::size_t>(n);
      }
    }
  }
  template <typename T>
  T get(Clock::duration timeout = 30s) {
    T value;
    auto* p = reinterpret_cast<char*>(&value);
    std::size_t left = sizeof value;
    const auto deadline = Clock::now() + timeout;
    while (left > 0) {
      const auto ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      pollfd pfd{in_, POLLIN, 0};
      require(ms.count() > 0 && ::poll(&pfd, 1, static_cast<int>(ms.count())) == 1,
              "waiting for the other process");
      const ssize_t n = ::read(in_, p, left);
      require(n > 0 || (n < 0 && errno == EINTR), "reading from the other process");
      if (n > 0) {
        p += n;
        left -= static_cast<std::size_t>(n);
      }
    }
    return value;
  }

 private:
  int in_ = -1;
  int out_ = -1;
};

// A forked child running `body`; its exit code is body's result (an exception: 1, with the
// message on stderr). Fork before this process opens the device: the child then opens its
// own, as a separate process on a NIC would.
class Child {
 public:
  explicit Child(const std::function<int(Link&)>& body) {
    int down[2];
    int up[2];
    require(pipe2(down, O_CLOEXEC) == 0 && pipe2(up, O_CLOEXEC) == 0, "pipe2");
    std::fflush(nullptr);
    pid_ = fork();
    require(pid_ >= 0, "fork");
    if (pid_ == 0) {
      ::close(down[1]);
      ::close(up[0]);
      int code = 1;
      try {
        Link link(down[0], up[1]);
        code = body(link);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "child %d: %s\n", static_cast<int>(getpid()), e.what());
      }
      std::fflush(nullptr);
      _exit(code);
    }
    ::close(down[0]);
    ::close(up[1]);
    link_ = Link(up[0], down[1]);
  }
  ~Child() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  Link& link() { return link_; }
  pid_t pid() const { return pid_; }
  // The exit code, 128 + the signal that killed it, or -1 when it runs on after `timeout`.
  int wait(Clock::duration timeout = 30s) {
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      int status = 0;
      const pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        reaped_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(5ms);
    }
    return -1;
  }

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  Link link_;
};

// What a peer process needs: the QP's address and a buffer it may access remotely.
struct Info {
  Address address;
  std::uint64_t addr;
  std::uint32_t rkey;
};

void check(bool ok, const std::string& what) { require(ok, what); }

constexpr std::size_t kRegion = 1u << 20;

// The two sides of a conversation between processes. The requester SENDs 1000 bytes, writes
// 64 KiB WITH IMMEDIATE 42 and READs 4 KiB; the responder checks every byte and answers
// "verified" with a SEND of its own. Each learns the other's address only from `link`.
int requester(Link& link) {
  Endpoint e;
  Buffer buffer(e, kRegion);
  check(e.toInit() == 0, "RESET->INIT");
  check(e.recv(5, {buffer.sge(0x80000, 16)}) == 0, "post_recv");
  link.put(Info{e.address(), buffer.addr(), buffer.mr->rkey});
  const Info peer = link.get<Info>();
  e.connectFromInit(peer.address);
  check(link.get<char>() == 'R', "the responder's readiness");
  fill(buffer.data(), 1000, 22);
  fill(buffer.data() + 4096, 65536, 23);
  check(e.post(IBV_WR_SEND, 1, {buffer.sge(0, 1000)}) == 0, "post SEND");
  check(e.post(IBV_WR_RDMA_WRITE_WITH_IMM, 2, {buffer.sge(4096, 65536)}, 0, peer.addr + 65536,
               peer.rkey, htonl(42)) == 0,
        "post WRITE WITH IMMEDIATE");
  check(e.post(IBV_WR_RDMA_READ, 3, {buffer.sge(200000, 4096)}, 0, peer.addr, peer.rkey) == 0,
        "post READ");
  const auto done = e.poll(4);
  check(done.size() == 4, "4 completions, got " + std::to_string(done.size()));
  for (const ibv_wc& wc : done) check(wc.status == IBV_WC_SUCCESS, statusText(wc));
  // The send queue's completions come in order; the receive (the answer, on the other
  // direction's connection) may come before the READ's.
  std::vector<std::uint64_t> sends;
  for (const ibv_wc& wc : done) {
    if (wc.opcode != IBV_WC_RECV) sends.push_back(wc.wr_id);
  }
  check(sends == std::vector<std::uint64_t>{1, 2, 3}, "the send queue's completion order");
  check(filled(buffer.data() + 200000, 4096, 21), "the READ's bytes");
  check(std::memcmp(buffer.data() + 0x80000, "verified", 8) == 0, "the responder's answer");
  return 0;
}

int responder(Link& link) {
  Endpoint e;
  Buffer buffer(e, kRegion);
  fill(buffer.data(), 4096, 21);
  check(e.toInit() == 0, "RESET->INIT");
  check(e.recv(1, {buffer.sge(8192, 4096)}) == 0, "post_recv");
  check(e.recv(2, {}) == 0, "post_recv");
  link.put(Info{e.address(), buffer.addr(), buffer.mr->rkey});
  const Info peer = link.get<Info>();
  e.connectFromInit(peer.address);
  link.put('R');
  const auto got = e.poll(2);
  check(got.size() == 2, "2 receives, got " + std::to_string(got.size()));
  check(got[0].wr_id == 1 && got[0].status == IBV_WC_SUCCESS && got[0].opcode == IBV_WC_RECV &&
            got[0].byte_len == 1000 && got[0].src_qp == peer.address.qpn,
        "the SEND's completion: " + statusText(got[0]));
  check(filled(buffer.data() + 8192, 1000, 22), "the SEND's bytes");
  check(got[1].wr_id == 2 && got[1].status == IBV_WC_SUCCESS &&
            got[1].opcode == IBV_WC_RECV_RDMA_WITH_IMM && got[1].byte_len == 65536 &&
            ntohl(got[1].imm_data) == 42,
        "the WRITE WITH IMMEDIATE's completion: " + statusText(got[1]));
  check(filled(buffer.data() + 65536, 65536, 23), "the WRITE's bytes");
  std::memcpy(buffer.data() + 300000, "verified", 8);
  check(e.post(IBV_WR_SEND, 9, {buffer.sge(300000, 8)}) == 0, "post SEND");
  const auto sent = e.poll(1);
  check(sent.size() == 1 && sent[0].status == IBV_WC_SUCCESS, "the answer's completion");
  check(link.get<char>() == 'B', "the requester's goodbye");
  return 0;
}

TEST(VerbsEmuProcesses, TwoProcessesExchangeEveryKindOfWork) {
  Child child(responder);
  EXPECT_EQ(requester(child.link()), 0);
  child.link().put('B');
  EXPECT_EQ(child.wait(), 0);
}

// The peer: connects, says ready, then waits to be stopped or killed.
int idlePeer(Link& link) {
  Endpoint e;
  Buffer buffer(e, 4096);
  check(e.toInit() == 0, "RESET->INIT");
  for (int i = 0; i < 4; ++i) check(e.recv(i, {buffer.sge(0, 64)}) == 0, "post_recv");
  link.put(Info{e.address(), buffer.addr(), buffer.mr->rkey});
  const Info peer = link.get<Info>();
  e.connectFromInit(peer.address);
  link.put('R');
  link.get<char>(120s);
  return 0;
}

// This process's side of a connection to `child` (an idlePeer).
Info connectTo(Child& child, Endpoint& e, Buffer& buffer) {
  const Info peer = child.link().get<Info>();
  child.link().put(Info{e.address(), buffer.addr(), buffer.mr->rkey});
  e.connect(peer.address);
  require(child.link().get<char>() == 'R', "the peer's readiness");
  return peer;
}

TEST(VerbsEmuProcesses, PeerKilledIsRetryExceeded) {
  Child child(idlePeer);
  Endpoint e(quickRetries());
  Buffer buffer(e, 4096);
  connectTo(child, e, buffer);
  ASSERT_EQ(e.post(IBV_WR_SEND, 1, {buffer.sge(0, 8)}), 0);
  const auto done = e.poll(1);
  ASSERT_EQ(done.size(), 1u);
  ASSERT_EQ(done[0].status, IBV_WC_SUCCESS);  // the connection is up
  ASSERT_EQ(::kill(child.pid(), SIGKILL), 0);
  ASSERT_EQ(child.wait(), 128 + SIGKILL);
  expectRetryExceeded(e, 4 * ackTimeoutOf(12));
}

TEST(VerbsEmuProcesses, StoppedThenKilledPeerWithWorkInFlight) {
  Child child(idlePeer);
  Endpoint e(quickRetries());
  constexpr int kWrites = 32;
  Buffer buffer(e, 1u << 20);
  const Info peer = connectTo(child, e, buffer);
  // A stopped process answers nothing; its connection stays open, so no ack timer runs
  // (its NIC would keep answering): the writes wait.
  ASSERT_EQ(::kill(child.pid(), SIGSTOP), 0);
  // kill() returns before a child running on another core has stopped: until it has, it may
  // still take some of the writes (seen on a loaded machine).
  int status = 0;
  ASSERT_EQ(::waitpid(child.pid(), &status, WUNTRACED), child.pid());
  ASSERT_TRUE(WIFSTOPPED(status));
  for (int i = 0; i < kWrites; ++i) {
    ASSERT_EQ(e.post(IBV_WR_RDMA_WRITE, i, {buffer.sge(0, 1u << 20)}, 0, peer.addr, peer.rkey), 0);
  }
  EXPECT_TRUE(e.drain(300ms).empty());  // far beyond 4 periods of 16.8 ms
  ASSERT_EQ(::kill(child.pid(), SIGKILL), 0);
  ASSERT_EQ(child.wait(), 128 + SIGKILL);
  const auto done = e.poll(kWrites);
  ASSERT_EQ(done.size(), static_cast<std::size_t>(kWrites));
  EXPECT_EQ(done[0].status, IBV_WC_RETRY_EXC_ERR) << statusText(done[0]);
  for (int i = 1; i < kWrites; ++i) {
    EXPECT_EQ(done[i].wr_id, static_cast<std::uint64_t>(i));
    EXPECT_EQ(done[i].status, IBV_WC_WR_FLUSH_ERR) << statusText(done[i]);
  }
}

std::size_t entries(const char* dir) {
  std::size_t n = 0;
  if (DIR* d = opendir(dir); d != nullptr) {
    while (dirent* entry = readdir(d)) n += entry->d_name[0] != '.';
    closedir(d);
  }
  return n;
}

// Threads of this process named `name` (the device names its wire thread).
std::size_t threadsNamed(const std::string& name) {
  std::size_t n = 0;
  if (DIR* d = opendir("/proc/self/task"); d != nullptr) {
    while (dirent* entry = readdir(d)) {
      if (entry->d_name[0] == '.') continue;
      const std::string path = std::string("/proc/self/task/") + entry->d_name + "/comm";
      if (FILE* f = std::fopen(path.c_str(), "r"); f != nullptr) {
        char comm[64] = "";
        if (std::fgets(comm, sizeof comm, f) != nullptr && name + "\n" == comm) ++n;
        std::fclose(f);
      }
    }
    closedir(d);
  }
  return n;
}

// Whether something accepts TCP connections at `ip`:`port`.
bool listening(const ibv_gid& gid, std::uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  std::memcpy(&to.sin_addr.s_addr, gid.raw + 12, 4);  // the GID's IPv4 address
  to.sin_port = htons(port);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0;
  ::close(fd);
  return ok;
}

TEST(VerbsEmuProcesses, NothingLeftAfterTheLastContextCloses) {
  const std::size_t fds = entries("/proc/self/fd");
  ASSERT_EQ(threadsNamed("verbs-emu-wire"), 0u);
  Address address{};
  {
    Pair p;
    Buffer local(p.a, 4096);
    Buffer in(p.b, 4096);
    ASSERT_EQ(p.b.recv(1, {in.sge(0, 64)}), 0);
    ASSERT_EQ(p.a.post(IBV_WR_SEND, 1, {local.sge(0, 64)}), 0);
    ASSERT_EQ(p.a.poll(1).size(), 1u);
    EXPECT_EQ(threadsNamed("verbs-emu-wire"), 1u);  // one per process, however many contexts
    address = p.a.address();
    EXPECT_TRUE(listening(address.gid, static_cast<std::uint16_t>(address.qpn >> 8)));
    ASSERT_EQ(p.a.qp.destroy(), 0);  // a QP destroyed with its connections open: nothing dangles
  }
  EXPECT_EQ(entries("/proc/self/fd"), fds);
  EXPECT_EQ(threadsNamed("verbs-emu-wire"), 0u);
  EXPECT_FALSE(listening(address.gid, static_cast<std::uint16_t>(address.qpn >> 8)));
}

// ---- two hosts: network namespaces --------------------------------------------------------------

int shell(const std::string& command) {
  const int status = std::system((command + " >/dev/null 2>&1").c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Two network namespaces joined by a veth pair, 198.51.100.201 and .202 (TEST-NET-2): two
// hosts for the device. Removed with everything in them when this goes away.
class TwoHosts {
 public:
  TwoHosts() {
    const std::string id = std::to_string(getpid());
    a_ = "collx-verbs-" + id + "-a";
    b_ = "collx-verbs-" + id + "-b";
    if (getuid() != 0) {
      why_ = "network namespaces need root";
      return;
    }
    if (shell("command -v ip") != 0) {
      why_ = "no 'ip' command";
      return;
    }
    if (shell("ip netns add " + a_) != 0) {
      why_ = "ip netns add failed (no network namespaces here)";
      return;
    }
    created_ = true;
    const std::string va = "cxe" + id + "a";
    const std::string vb = "cxe" + id + "b";
    ok_ = shell("ip netns add " + b_) == 0 &&
          shell("ip link add " + va + " netns " + a_ + " type veth peer name " + vb + " netns " +
                b_) == 0 &&
          shell("ip -n " + a_ + " addr add 198.51.100.201/24 dev " + va) == 0 &&
          shell("ip -n " + b_ + " addr add 198.51.100.202/24 dev " + vb) == 0 &&
          shell("ip -n " + a_ + " link set " + va + " up") == 0 &&
          shell("ip -n " + b_ + " link set " + vb + " up") == 0 &&
          shell("ip -n " + a_ + " link set lo up") == 0 &&
          shell("ip -n " + b_ + " link set lo up") == 0;
    if (!ok_) why_ = "setting up the veth pair failed";
  }
  ~TwoHosts() {
    if (created_) {
      shell("ip netns del " + a_);
      shell("ip netns del " + b_);  // the veth pair goes with its namespaces
    }
  }
  bool ok() const { return ok_; }
  const std::string& why() const { return why_; }
  // Runs `body` in a child process inside host `a` or `b`.
  std::function<int(Link&)> in(bool hostA, std::function<int(Link&)> body) const {
    const std::string path = "/var/run/netns/" + (hostA ? a_ : b_);
    return [path, body](Link& link) {
      const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      require(fd >= 0 && setns(fd, CLONE_NEWNET) == 0, "entering " + path);
      ::close(fd);
      return body(link);
    };
  }

 private:
  std::string a_;
  std::string b_;
  std::string why_;
  bool created_ = false;
  bool ok_ = false;
};

TEST(VerbsEmuProcesses, TwoHostsInNetworkNamespaces) {
  TwoHosts hosts;
  if (!hosts.ok()) GTEST_SKIP() << "no simulated hosts: " << hosts.why();
  Child a(hosts.in(true, requester));
  Child b(hosts.in(false, responder));
  // This process relays what the two hosts say to each other.
  const Info infoA = a.link().get<Info>();
  const Info infoB = b.link().get<Info>();
  // Each device took its host's address (the veth's), not loopback.
  const std::uint8_t ipA[4] = {198, 51, 100, 201};
  const std::uint8_t ipB[4] = {198, 51, 100, 202};
  EXPECT_EQ(std::memcmp(infoA.address.gid.raw + 12, ipA, 4), 0);
  EXPECT_EQ(std::memcmp(infoB.address.gid.raw + 12, ipB, 4), 0);
  a.link().put(infoB);
  b.link().put(infoA);
  a.link().put(b.link().get<char>());  // 'R'
  EXPECT_EQ(a.wait(), 0);
  b.link().put('B');
  EXPECT_EQ(b.wait(), 0);
}

}  // namespace
}  // namespace collx::transport::ibverbs
