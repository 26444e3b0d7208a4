// The userspace verbs device's entry points: the libibverbs functions collx resolves (exported
// at libibverbs' symbol versions, libcollx_verbs_emu.map) and the context's ops table that
// the inline ibv_post_send / ibv_post_recv / ibv_poll_cq / ibv_req_notify_cq of
// <infiniband/verbs.h> call. What happens on the wire is in emu_engine.cc.
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "emu.h"

// Three names of <infiniband/verbs.h> are macros over inline functions; the library exports
// the functions themselves.
#undef ibv_get_device_list
#undef ibv_reg_mr
#undef ibv_query_port

// The layout the exported ibv_query_port@IBVERBS_1.1 fills: ibv_port_attr up to `flags`
// (rdma-core's compat structure; newer fields follow it in ibv_port_attr).
struct _compat_ibv_port_attr {
  ibv_port_state state;
  ibv_mtu max_mtu;
  ibv_mtu active_mtu;
  int gid_tbl_len;
  std::uint32_t port_cap_flags;
  std::uint32_t max_msg_sz;
  std::uint32_t bad_pkey_cntr;
  std::uint32_t qkey_viol_cntr;
  std::uint16_t pkey_tbl_len;
  std::uint16_t lid;
  std::uint16_t sm_lid;
  std::uint8_t lmc;
  std::uint8_t max_vl_num;
  std::uint8_t sm_sl;
  std::uint8_t subnet_timeout;
  std::uint8_t init_type_reply;
  std::uint8_t active_width;
  std::uint8_t active_speed;
  std::uint8_t phys_state;
  std::uint8_t link_layer;
  std::uint8_t flags;
};
static_assert(offsetof(_compat_ibv_port_attr, flags) == offsetof(ibv_port_attr, flags));

namespace collx::verbs_emu {
namespace {

constexpr const char* kDeviceName = "emu0";

void complain(const char* what) { std::fprintf(stderr, "collx_verbs_emu: %s\n", what); }

// The one device of the process.
ibv_device* device() {
  static ibv_device* instance = [] {
    static ibv_device d{};
    d.node_type = IBV_NODE_CA;
    d.transport_type = IBV_TRANSPORT_IB;
    std::snprintf(d.name, sizeof d.name, "%s", kDeviceName);
    std::snprintf(d.dev_name, sizeof d.dev_name, "uverbs-emu0");
    std::snprintf(d.dev_path, sizeof d.dev_path, "/nonexistent/collx_verbs_emu/uverbs-emu0");
    std::snprintf(d.ibdev_path, sizeof d.ibdev_path, "/nonexistent/collx_verbs_emu/emu0");
    return &d;
  }();
  return instance;
}

Context* contextOf(ibv_context* context) { return fromBase<Context>(context); }
Pd* pdOf(ibv_pd* pd) { return fromBase<Pd>(pd); }
Mr* mrOf(ibv_mr* mr) { return fromBase<Mr>(mr); }
Channel* channelOf(ibv_comp_channel* channel) { return fromBase<Channel>(channel); }
Cq* cqOf(ibv_cq* cq) { return fromBase<Cq>(cq); }
Qp* qpOf(ibv_qp* qp) { return fromBase<Qp>(qp); }

// ---- the QP state machine -----------------------------------------------------------------

// The attribute masks each RC transition requires and allows: the kernel's qp_state_table
// (drivers/infiniband/core/verbs.c, ib_modify_qp_is_ok), RC column. SQD and SQE are not
// emulated (EOPNOTSUPP).
struct Transition {
  bool valid = false;
  int required = 0;
  int optional = 0;
};

Transition transition(ibv_qp_state from, ibv_qp_state to) {
  Transition t;
  if (to == IBV_QPS_RESET || to == IBV_QPS_ERR) {
    t.valid = true;  // from any state, with no attribute but the state
    return t;
  }
  switch (from) {
    case IBV_QPS_RESET:
      if (to == IBV_QPS_INIT) {
        t = {true, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, 0};
      }
      break;
    case IBV_QPS_INIT:
      if (to == IBV_QPS_INIT) {
        t = {true, 0, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS};
      } else if (to == IBV_QPS_RTR) {
        t = {true,
             IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                 IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
             IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX};
      }
      break;
    case IBV_QPS_RTR:
      if (to == IBV_QPS_RTS) {
        t = {true,
             IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                 IBV_QP_MAX_QP_RD_ATOMIC,
             IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER |
                 IBV_QP_PATH_MIG_STATE};
      }
      break;
    case IBV_QPS_RTS:
      if (to == IBV_QPS_RTS) {
        t = {true, 0,
             IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE |
                 IBV_QP_MIN_RNR_TIMER};
      } else if (to == IBV_QPS_SQD) {
        t = {true, 0, IBV_QP_EN_SQD_ASYNC_NOTIFY};
      }
      break;
    default:
      break;
  }
  return t;
}

bool ipv4Mapped(const ibv_gid& gid) {
  static const std::uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::memcmp(gid.raw, kPrefix, sizeof kPrefix) == 0;
}

constexpr int kAccessKnown = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                             IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

// The values of the attributes in `mask`, as a driver checks them: EINVAL for a value the
// hardware cannot take.
int checkValues(const ibv_qp_attr& a, int mask) {
  if ((mask & IBV_QP_PORT) && a.port_num != 1) return EINVAL;
  if ((mask & IBV_QP_PKEY_INDEX) && a.pkey_index != 0) return EINVAL;
  if ((mask & IBV_QP_ACCESS_FLAGS) && (static_cast<int>(a.qp_access_flags) & ~kAccessKnown)) {
    return EINVAL;
  }
  if (mask & IBV_QP_AV) {
    // RoCE: every packet carries a GRH; the source GID is entry 0, the only one.
    const ibv_ah_attr& ah = a.ah_attr;
    if (infiniband()) {
      // InfiniBand: a LID within the subnet; the emulated wire needs no GRH (and takes none).
      if (ah.is_global || ah.dlid == 0 || ah.dlid >= 0xc000) return EINVAL;
    } else if (!ah.is_global || ah.grh.sgid_index != 0 || !ipv4Mapped(ah.grh.dgid)) {
      return EINVAL;
    }
    if (ah.port_num != 0 && ah.port_num != 1) return EINVAL;
  }
  if ((mask & IBV_QP_ALT_PATH)) return EINVAL;  // the kernel bans alternate paths on RoCE
  if ((mask & IBV_QP_PATH_MTU) && (a.path_mtu < IBV_MTU_256 || a.path_mtu > IBV_MTU_4096)) {
    return EINVAL;
  }
  if ((mask & IBV_QP_DEST_QPN) && a.dest_qp_num > kPsnMask) return EINVAL;
  if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && a.max_dest_rd_atomic > kMaxRdAtomic) return EINVAL;
  if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && a.max_rd_atomic > kMaxRdAtomic) return EINVAL;
  if ((mask & IBV_QP_MIN_RNR_TIMER) && a.min_rnr_timer > 31) return EINVAL;
  if ((mask & IBV_QP_TIMEOUT) && a.timeout > 31) return EINVAL;
  if ((mask & IBV_QP_RETRY_CNT) && a.retry_cnt > 7) return EINVAL;
  if ((mask & IBV_QP_RNR_RETRY) && a.rnr_retry > 7) return EINVAL;
  return 0;
}

// ---- the context's ops table --------------------------------------------------------------

int postSend(ibv_qp* raw, ibv_send_wr* wr, ibv_send_wr** bad) {
  Qp& qp = *qpOf(raw);
  Engine& engine = *qp.context->engine;
  std::lock_guard lock(engine.mu);
  const auto state = static_cast<ibv_qp_state>(qp.base.state);
  int rc = 0;
  for (; wr != nullptr; wr = wr->next) {
    // Before RTS the send queue does not run (hardware refuses the doorbell's work).
    if (state != IBV_QPS_RTS && state != IBV_QPS_ERR) {
      rc = EINVAL;
      break;
    }
    switch (wr->opcode) {
      case IBV_WR_SEND:
      case IBV_WR_SEND_WITH_IMM:
      case IBV_WR_RDMA_WRITE:
      case IBV_WR_RDMA_WRITE_WITH_IMM:
      case IBV_WR_RDMA_READ:
        break;
      default:
        rc = EINVAL;  // atomics, invalidation, memory windows: not emulated
        break;
    }
    if (rc != 0) break;
    if (wr->num_sge < 0 || wr->num_sge > static_cast<int>(qp.cap.max_send_sge)) {
      rc = EINVAL;
      break;
    }
    const bool isInline = (wr->send_flags & IBV_SEND_INLINE) != 0;
    std::uint64_t length = 0;
    for (int i = 0; i < wr->num_sge; ++i) length += wr->sg_list[i].length;
    if (isInline && (wr->opcode == IBV_WR_RDMA_READ || length > qp.cap.max_inline_data)) {
      rc = EINVAL;
      break;
    }
    if (qp.sq.size() >= qp.cap.max_send_wr) {
      rc = ENOMEM;  // the send queue is full (unsignaled requests keep their slots)
      break;
    }
    SendOp op;
    op.wrId = wr->wr_id;
    op.opcode = wr->opcode;
    op.signaled = qp.sigAll || (wr->send_flags & IBV_SEND_SIGNALED) != 0;
    op.solicited = (wr->send_flags & IBV_SEND_SOLICITED) != 0;
    op.isInline = isInline;
    op.imm = wr->imm_data;
    op.length = length;
    if (wr->opcode == IBV_WR_RDMA_WRITE || wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM ||
        wr->opcode == IBV_WR_RDMA_READ) {
      op.remoteAddr = wr->wr.rdma.remote_addr;
      op.rkey = wr->wr.rdma.rkey;
    }
    for (int i = 0; i < wr->num_sge; ++i) {
      const ibv_sge& s = wr->sg_list[i];
      if (isInline) {
        // Inline data is copied now: the caller may reuse its buffer once post returns.
        const auto* bytes = reinterpret_cast<const std::uint8_t*>(s.addr);
        op.inlineData.insert(op.inlineData.end(), bytes, bytes + s.length);
      } else {
        op.sges.push_back(Sge{s.addr, s.length, s.lkey});
      }
    }
    op.psn = qp.nextPsn;
    qp.nextPsn = (qp.nextPsn + 1) & kPsnMask;
    if (state == IBV_QPS_ERR) {
      // Accepted and flushed at once (how a consumer drains a QP).
      engine.flushed(qp, qp.sendCq, op.wrId, IBV_WC_SEND);
      continue;
    }
    qp.sq.push_back(std::move(op));
  }
  if (rc != 0 && bad != nullptr) *bad = wr;
  engine.wake();
  return rc;
}

int postRecv(ibv_qp* raw, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  Qp& qp = *qpOf(raw);
  Engine& engine = *qp.context->engine;
  std::lock_guard lock(engine.mu);
  const auto state = static_cast<ibv_qp_state>(qp.base.state);
  int rc = 0;
  for (; wr != nullptr; wr = wr->next) {
    if (state == IBV_QPS_RESET) {
      rc = EINVAL;  // receives may be posted from INIT on
      break;
    }
    if (wr->num_sge < 0 || wr->num_sge > static_cast<int>(qp.cap.max_recv_sge)) {
      rc = EINVAL;
      break;
    }
    if (qp.rq.size() >= qp.cap.max_recv_wr) {
      rc = ENOMEM;
      break;
    }
    RecvOp op;
    op.wrId = wr->wr_id;
    for (int i = 0; i < wr->num_sge; ++i) {
      op.sges.push_back(Sge{wr->sg_list[i].addr, wr->sg_list[i].length, wr->sg_list[i].lkey});
    }
    if (state == IBV_QPS_ERR) {
      engine.flushed(qp, qp.recvCq, op.wrId, IBV_WC_RECV);
      continue;
    }
    qp.rq.push_back(std::move(op));
  }
  if (rc != 0 && bad != nullptr) *bad = wr;
  engine.wake();
  return rc;
}

int pollCq(ibv_cq* raw, int entries, ibv_wc* wc) {
  Cq& cq = *cqOf(raw);
  std::lock_guard lock(cq.mu);
  if (cq.overrun) return -EOVERFLOW;
  int n = 0;
  while (n < entries && !cq.entries.empty()) {
    wc[n++] = cq.entries.front();
    cq.entries.pop_front();
  }
  return n;
}

int reqNotifyCq(ibv_cq* raw, int solicitedOnly) {
  Cq& cq = *cqOf(raw);
  if (cq.channel == nullptr) return 0;  // allowed on hardware: the event goes nowhere
  std::lock_guard lock(cq.mu);
  // An event follows the next completion added: entries already there do not count (poll
  // after arming, as every consumer must, to see them).
  if (!cq.armed || !solicitedOnly) cq.solicitedOnly = solicitedOnly != 0;
  cq.armed = true;
  return 0;
}

int unsupportedPostSrqRecv(ibv_srq*, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  if (bad != nullptr) *bad = wr;
  return EOPNOTSUPP;
}

}  // namespace

// The engine's half of completions (declared in emu.h).
void Engine::complete(Cq* cq, const ibv_wc& wc, bool solicited) {
  Channel* notify = nullptr;
  {
    std::lock_guard lock(cq->mu);
    if (cq->overrun) return;
    if (static_cast<int>(cq->entries.size()) >= cq->capacity) {
      // Hardware raises IBV_EVENT_CQ_ERR and the CQ stops working: here every later poll
      // fails, so a too small CQ cannot pass unnoticed.
      cq->overrun = true;
      std::fprintf(stderr,
                   "collx_verbs_emu: CQ overrun: %d completions not polled; ibv_poll_cq fails "
                   "from now on\n",
                   cq->capacity);
      return;
    }
    cq->entries.push_back(wc);
    if (cq->armed && (!cq->solicitedOnly || solicited || wc.status != IBV_WC_SUCCESS)) {
      cq->armed = false;
      notify = cq->channel;
    }
  }
  if (notify != nullptr) {
    std::lock_guard lock(notify->mu);
    notify->events.push_back(cq);
    const std::uint64_t one = 1;
    if (::write(notify->base.fd, &one, sizeof one) != sizeof one) {
      complain("writing a completion channel's eventfd failed");
    }
  }
}

}  // namespace collx::verbs_emu

using namespace collx::verbs_emu;

extern "C" {

ibv_device** ibv_get_device_list(int* count) {
  // COLLX_VERBS_EMU_DEVICES=0: a machine whose library finds no device (an empty list).
  const char* devices = std::getenv("COLLX_VERBS_EMU_DEVICES");
  const int n = devices != nullptr && std::strcmp(devices, "0") == 0 ? 0 : 1;
  auto** list = static_cast<ibv_device**>(std::calloc(n + 1, sizeof(ibv_device*)));
  if (list == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  if (n == 1) list[0] = device();
  if (count != nullptr) *count = n;
  return list;
}

void ibv_free_device_list(ibv_device** list) { std::free(list); }

const char* ibv_get_device_name(ibv_device* d) { return d == device() ? kDeviceName : nullptr; }

ibv_context* ibv_open_device(ibv_device* d) {
  if (d != device()) {
    errno = EINVAL;
    return nullptr;
  }
  Engine* engine = acquireEngine();
  if (engine == nullptr) return nullptr;
  auto* context = new (std::nothrow) Context();
  if (context == nullptr) {
    releaseEngine(engine);
    errno = ENOMEM;
    return nullptr;
  }
  context->engine = engine;
  ibv_context& base = context->base;
  base.device = d;
  base.cmd_fd = -1;  // no kernel: no command or async event file
  base.async_fd = -1;
  base.num_comp_vectors = 1;
  pthread_mutex_init(&base.mutex, nullptr);
  base.abi_compat = nullptr;  // a plain ibv_context: no extended verbs
  base.ops.poll_cq = pollCq;
  base.ops.req_notify_cq = reqNotifyCq;
  base.ops.post_send = postSend;
  base.ops.post_recv = postRecv;
  base.ops.post_srq_recv = unsupportedPostSrqRecv;
  return &base;
}

int ibv_close_device(ibv_context* raw) {
  Context* context = contextOf(raw);
  {
    std::lock_guard lock(context->engine->mu);
    if (context->pds + context->cqs + context->channels != 0) {
      // The kernel would clean up after the caller; this device insists on destruction in
      // order, so that code tested here leaks nothing on hardware.
      std::fprintf(stderr,
                   "collx_verbs_emu: ibv_close_device with %d PDs, %d CQs and %d completion "
                   "channels not destroyed: EBUSY\n",
                   context->pds, context->cqs, context->channels);
      errno = EBUSY;
      return -1;
    }
  }
  releaseEngine(context->engine);
  pthread_mutex_destroy(&raw->mutex);
  delete context;
  return 0;
}

int ibv_query_device(ibv_context* raw, ibv_device_attr* a) {
  (void)raw;
  std::memset(a, 0, sizeof(*a));
  std::snprintf(a->fw_ver, sizeof a->fw_ver, "collx-verbs-emu");
  a->node_guid = htobe64(0x02c011c0ffee0001ull);
  a->sys_image_guid = a->node_guid;
  a->max_mr_size = 1ull << 40;
  a->page_size_cap = 4096;
  a->vendor_id = 0;
  a->max_qp = kMaxQps;
  a->max_qp_wr = kMaxQpWr;
  a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_PORT_ACTIVE_EVENT;
  a->max_sge = kMaxSge;
  a->max_sge_rd = kMaxSge;
  a->max_cq = 4096;
  a->max_cqe = kMaxCqe;
  a->max_mr = 1 << 20;
  a->max_pd = 4096;
  a->max_qp_rd_atom = kMaxRdAtomic;
  a->max_qp_init_rd_atom = kMaxRdAtomic;
  a->max_res_rd_atom = kMaxRdAtomic * kMaxQps;
  a->atomic_cap = IBV_ATOMIC_NONE;
  a->max_pkeys = 1;
  a->phys_port_cnt = 1;
  return 0;
}

int ibv_query_port(ibv_context* raw, std::uint8_t port, _compat_ibv_port_attr* a) {
  if (port != 1) return EINVAL;
  std::memset(a, 0, sizeof(*a));
  a->state = IBV_PORT_ACTIVE;
  a->max_mtu = IBV_MTU_4096;
  a->active_mtu = IBV_MTU_1024;  // RoCE over a 1500-byte Ethernet MTU
  a->gid_tbl_len = 1;
  a->port_cap_flags = 0;
  a->max_msg_sz = static_cast<std::uint32_t>(kMaxMessage);
  a->pkey_tbl_len = 1;
  a->lid = 0;            // RoCE: no LID, the GID addresses the port
  a->active_width = 2;   // 4X
  a->active_speed = 32;  // EDR
  a->phys_state = 5;     // LinkUp
  a->link_layer = IBV_LINK_LAYER_ETHERNET;
  if (infiniband()) {
    a->lid = lidOf(contextOf(raw)->engine->ip);
    a->sm_lid = 1;
    a->active_mtu = IBV_MTU_4096;
    a->link_layer = IBV_LINK_LAYER_INFINIBAND;
  }
  return 0;
}

int ibv_query_gid(ibv_context* raw, std::uint8_t port, int index, ibv_gid* gid) {
  if (port != 1 || index != 0) {
    errno = EINVAL;
    return -1;
  }
  // RoCE v2 GID of an IPv4 address: ::ffff:a.b.c.d. InfiniBand: the default subnet prefix
  // fe80::/64 and a port GUID made of the address.
  std::memset(gid->raw, 0, sizeof gid->raw);
  const std::uint32_t ip = contextOf(raw)->engine->ip;
  if (infiniband()) {
    gid->raw[0] = 0xfe;
    gid->raw[1] = 0x80;
    gid->raw[8] = 0x02;
    gid->raw[9] = 0xc9;
  } else {
    gid->raw[10] = 0xff;
    gid->raw[11] = 0xff;
  }
  std::memcpy(gid->raw + 12, &ip, 4);
  return 0;
}

ibv_pd* ibv_alloc_pd(ibv_context* raw) {
  Context* context = contextOf(raw);
  auto* pd = new (std::nothrow) Pd();
  if (pd == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  std::lock_guard lock(context->engine->mu);
  pd->context = context;
  pd->base.context = raw;
  pd->base.handle = 0;
  ++context->pds;
  return &pd->base;
}

int ibv_dealloc_pd(ibv_pd* raw) {
  Pd* pd = pdOf(raw);
  std::lock_guard lock(pd->context->engine->mu);
  if (pd->mrs != 0 || pd->qps != 0) return EBUSY;
  --pd->context->pds;
  delete pd;
  return 0;
}

ibv_mr* ibv_reg_mr(ibv_pd* raw, void* addr, std::size_t length, int access) {
  Pd* pd = pdOf(raw);
  if (length == 0 || (access & ~kAccessKnown) != 0 ||
      // Remote write (and atomics) need local write: the kernel refuses the combination.
      ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
       !(access & IBV_ACCESS_LOCAL_WRITE))) {
    errno = EINVAL;
    return nullptr;
  }
  // Registration pins the pages: memory that is not mapped cannot be registered.
  const std::uintptr_t page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
  const std::uintptr_t first = reinterpret_cast<std::uintptr_t>(addr) & ~(page - 1);
  const std::uintptr_t end = reinterpret_cast<std::uintptr_t>(addr) + length;
  std::vector<unsigned char> residency((end - first + page - 1) / page);
  if (mincore(reinterpret_cast<void*>(first), end - first, residency.data()) != 0) {
    errno = EFAULT;
    return nullptr;
  }
  auto* mr = new (std::nothrow) Mr();
  if (mr == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  Engine& engine = *pd->context->engine;
  // A real registration pins the pages, writable ones faulted in for writing (FOLL_WRITE: a
  // private page shared copy-on-write gets its own copy first): their frames are what the
  // device will access from now on, whatever the process maps there later.
  if (madvise(reinterpret_cast<void*>(first), end - first, MADV_POPULATE_WRITE) != 0) {
    madvise(reinterpret_cast<void*>(first), end - first, MADV_POPULATE_READ);
  }
  mr->firstPage = first;
  if (!readFrames(engine.pagemapFd, first, residency.size(), &mr->frames) ||
      std::find(mr->frames.begin(), mr->frames.end(), 0) != mr->frames.end()) {
    mr->frames.clear();  // no frames to compare (not root; memory that cannot be populated)
  }
  std::lock_guard lock(engine.mu);
  // Keys: an index and an 8-bit generation, as hardware keys carry a variant byte; the rkey
  // differs from the lkey (it does on some providers), so a mix-up fails here.
  const std::uint32_t index = engine.nextMrIndex++ & 0xffffff;
  mr->pd = pd;
  mr->access = access;
  mr->base.context = &pd->context->base;
  mr->base.pd = raw;
  mr->base.addr = addr;
  mr->base.length = length;
  mr->base.handle = index;
  mr->base.lkey = (index << 8) | 0x11;
  mr->base.rkey = (index << 8) | 0x22;
  engine.byLkey[mr->base.lkey] = mr;
  engine.byRkey[mr->base.rkey] = mr;
  ++pd->mrs;
  return &mr->base;
}

int ibv_dereg_mr(ibv_mr* raw) {
  Mr* mr = mrOf(raw);
  Engine& engine = *mr->pd->context->engine;
  // The wire thread touches registered memory only with mu held: once this returns, no
  // access through the keys happens again (hardware invalidates them at once too).
  std::lock_guard lock(engine.mu);
  engine.byLkey.erase(raw->lkey);
  engine.byRkey.erase(raw->rkey);
  --mr->pd->mrs;
  delete mr;
  return 0;
}

ibv_comp_channel* ibv_create_comp_channel(ibv_context* raw) {
  Context* context = contextOf(raw);
  // One eventfd count per event: the fd is readable while events wait (poll() on it, or
  // make it non-blocking for ibv_get_cq_event, as with libibverbs' own channel fd).
  const int fd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
  if (fd < 0) return nullptr;
  auto* channel = new (std::nothrow) Channel();
  if (channel == nullptr) {
    ::close(fd);
    errno = ENOMEM;
    return nullptr;
  }
  std::lock_guard lock(context->engine->mu);
  channel->context = context;
  channel->base.context = raw;
  channel->base.fd = fd;
  channel->base.refcnt = 0;
  ++context->channels;
  return &channel->base;
}

int ibv_destroy_comp_channel(ibv_comp_channel* raw) {
  Channel* channel = channelOf(raw);
  std::lock_guard lock(channel->context->engine->mu);
  if (channel->cqs != 0) return EBUSY;
  --channel->context->channels;
  ::close(raw->fd);
  delete channel;
  return 0;
}

ibv_cq* ibv_create_cq(ibv_context* raw, int cqe, void* cqContext, ibv_comp_channel* channelRaw,
                      int compVector) {
  Context* context = contextOf(raw);
  if (cqe < 1 || cqe > kMaxCqe || compVector < 0 || compVector >= raw->num_comp_vectors ||
      (channelRaw != nullptr && channelRaw->context != raw)) {
    errno = EINVAL;
    return nullptr;
  }
  auto* cq = new (std::nothrow) Cq();
  if (cq == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  std::lock_guard lock(context->engine->mu);
  cq->context = context;
  cq->channel = channelRaw != nullptr ? channelOf(channelRaw) : nullptr;
  cq->capacity = cqe;
  ibv_cq& base = cq->base;
  base.context = raw;
  base.channel = channelRaw;
  base.cq_context = cqContext;
  base.handle = 0;
  base.cqe = cqe;
  pthread_mutex_init(&base.mutex, nullptr);
  pthread_cond_init(&base.cond, nullptr);
  if (cq->channel != nullptr) ++cq->channel->cqs;
  ++context->cqs;
  return &base;
}

int ibv_destroy_cq(ibv_cq* raw) {
  Cq* cq = cqOf(raw);
  std::lock_guard lock(cq->context->engine->mu);
  if (cq->qps != 0) return EBUSY;
  {
    std::lock_guard cqLock(cq->mu);
    if (cq->delivered != cq->acked) {
      // libibverbs waits here until every event is acknowledged (forever, if the caller
      // forgot): a refusal says so instead.
      std::fprintf(stderr,
                   "collx_verbs_emu: ibv_destroy_cq with %llu events not acknowledged "
                   "(ibv_ack_cq_events): EBUSY; libibverbs would wait forever\n",
                   static_cast<unsigned long long>(cq->delivered - cq->acked));
      return EBUSY;
    }
  }
  if (cq->channel != nullptr) {
    std::lock_guard channelLock(cq->channel->mu);
    std::replace(cq->channel->events.begin(), cq->channel->events.end(), cq,
                 static_cast<Cq*>(nullptr));
    --cq->channel->cqs;
  }
  --cq->context->cqs;
  pthread_cond_destroy(&raw->cond);
  pthread_mutex_destroy(&raw->mutex);
  delete cq;
  return 0;
}

int ibv_get_cq_event(ibv_comp_channel* raw, ibv_cq** cqOut, void** cqContext) {
  Channel* channel = channelOf(raw);
  for (;;) {
    // Blocks unless the caller made the fd non-blocking (then -1 with EAGAIN), as
    // libibverbs' read() of the kernel's event file does.
    std::uint64_t count = 0;
    if (::read(raw->fd, &count, sizeof count) != sizeof count) return -1;
    std::lock_guard lock(channel->mu);
    Cq* cq = channel->events.empty() ? nullptr : channel->events.front();
    if (!channel->events.empty()) channel->events.pop_front();
    if (cq == nullptr) continue;  // an event of a CQ destroyed since
    {
      std::lock_guard cqLock(cq->mu);
      ++cq->delivered;
    }
    *cqOut = &cq->base;
    *cqContext = cq->base.cq_context;
    return 0;
  }
}

void ibv_ack_cq_events(ibv_cq* raw, unsigned int events) {
  Cq* cq = cqOf(raw);
  std::lock_guard lock(cq->mu);
  cq->acked += events;
}

ibv_qp* ibv_create_qp(ibv_pd* pdRaw, ibv_qp_init_attr* init) {
  Pd* pd = pdOf(pdRaw);
  Context* context = pd->context;
  if (init->qp_type != IBV_QPT_RC || init->srq != nullptr) {
    errno = EOPNOTSUPP;  // RC queue pairs with their own receive queue only
    return nullptr;
  }
  ibv_qp_cap& cap = init->cap;
  if (init->send_cq == nullptr || init->recv_cq == nullptr ||
      init->send_cq->context != pdRaw->context || init->recv_cq->context != pdRaw->context ||
      cap.max_send_wr < 1 || cap.max_send_wr > kMaxQpWr || cap.max_recv_wr > kMaxQpWr ||
      cap.max_send_sge > kMaxSge || cap.max_recv_sge > kMaxSge ||
      cap.max_inline_data > kMaxInline) {
    errno = EINVAL;
    return nullptr;
  }
  Engine& engine = *context->engine;
  std::lock_guard lock(engine.mu);
  int index = 0;
  while (index < kMaxQps && engine.qps[index] != nullptr) ++index;
  if (index == kMaxQps) {
    errno = ENOMEM;
    return nullptr;
  }
  auto* qp = new (std::nothrow) Qp();
  if (qp == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  qp->context = context;
  qp->pd = pd;
  qp->sendCq = cqOf(init->send_cq);
  qp->recvCq = cqOf(init->recv_cq);
  qp->index = index;
  qp->sigAll = init->sq_sig_all != 0;
  qp->cap = cap;
  ibv_qp& base = qp->base;
  base.context = &context->base;
  base.qp_context = init->qp_context;
  base.pd = pdRaw;
  base.send_cq = init->send_cq;
  base.recv_cq = init->recv_cq;
  base.srq = nullptr;
  base.handle = static_cast<std::uint32_t>(index);
  base.qp_num = engine.qpn(index);
  base.state = IBV_QPS_RESET;
  base.qp_type = IBV_QPT_RC;
  pthread_mutex_init(&base.mutex, nullptr);
  pthread_cond_init(&base.cond, nullptr);
  qp->attr.qp_state = IBV_QPS_RESET;
  engine.qps[index] = qp;
  ++pd->qps;
  ++qp->sendCq->qps;
  ++qp->recvCq->qps;
  return &base;
}

int ibv_modify_qp(ibv_qp* raw, ibv_qp_attr* attr, int mask) {
  Qp& qp = *qpOf(raw);
  Engine& engine = *qp.context->engine;
  std::lock_guard lock(engine.mu);
  auto current = static_cast<ibv_qp_state>(raw->state);
  if (mask & IBV_QP_CUR_STATE) {
    // Allowed only where the kernel allows it, and it must be the truth.
    if (current != IBV_QPS_RTR && current != IBV_QPS_RTS && current != IBV_QPS_SQD &&
        current != IBV_QPS_SQE) {
      return EINVAL;
    }
    if (attr->cur_qp_state != current) return EINVAL;
  }
  const ibv_qp_state next = (mask & IBV_QP_STATE) ? attr->qp_state : current;
  if (next < IBV_QPS_RESET || next > IBV_QPS_ERR) return EINVAL;
  const Transition t = transition(current, next);
  if (!t.valid) return EINVAL;
  if ((mask & t.required) != t.required) return EINVAL;
  if (mask & ~(t.required | t.optional | IBV_QP_STATE)) return EINVAL;
  if (const int rc = checkValues(*attr, mask); rc != 0) return rc;
  if (next == IBV_QPS_SQD || next == IBV_QPS_SQE) return EOPNOTSUPP;

  ibv_qp_attr& a = qp.attr;
  if (mask & IBV_QP_PKEY_INDEX) a.pkey_index = attr->pkey_index;
  if (mask & IBV_QP_PORT) a.port_num = attr->port_num;
  if (mask & IBV_QP_ACCESS_FLAGS) a.qp_access_flags = attr->qp_access_flags;
  if (mask & IBV_QP_AV) a.ah_attr = attr->ah_attr;
  if (mask & IBV_QP_PATH_MTU) a.path_mtu = attr->path_mtu;
  if (mask & IBV_QP_DEST_QPN) a.dest_qp_num = attr->dest_qp_num;
  if (mask & IBV_QP_RQ_PSN) a.rq_psn = attr->rq_psn & kPsnMask;  // the kernel masks too
  if (mask & IBV_QP_SQ_PSN) a.sq_psn = attr->sq_psn & kPsnMask;
  if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) a.max_dest_rd_atomic = attr->max_dest_rd_atomic;
  if (mask & IBV_QP_MAX_QP_RD_ATOMIC) a.max_rd_atomic = attr->max_rd_atomic;
  if (mask & IBV_QP_MIN_RNR_TIMER) a.min_rnr_timer = attr->min_rnr_timer;
  if (mask & IBV_QP_TIMEOUT) a.timeout = attr->timeout;
  if (mask & IBV_QP_RETRY_CNT) a.retry_cnt = attr->retry_cnt;
  if (mask & IBV_QP_RNR_RETRY) a.rnr_retry = attr->rnr_retry;
  if (mask & IBV_QP_PATH_MIG_STATE) a.path_mig_state = attr->path_mig_state;

  if (next == IBV_QPS_ERR && current != IBV_QPS_ERR) {
    engine.enterError(qp);  // flushes, closes
  } else if (next == IBV_QPS_RESET) {
    engine.reset(qp);
    const ibv_qp_attr cleared{};
    a = cleared;
  } else if (current == IBV_QPS_INIT && next == IBV_QPS_RTR) {
    qp.expectedPsn = a.rq_psn;
    qp.nakPending = false;
  } else if (current == IBV_QPS_RTR && next == IBV_QPS_RTS) {
    qp.nextPsn = a.sq_psn;
    qp.rnrLeft = a.rnr_retry;
    qp.retriesLeft = a.retry_cnt;
  }
  a.qp_state = next;
  a.cur_qp_state = next;
  raw->state = next;
  engine.wake();
  return 0;
}

int ibv_query_qp(ibv_qp* raw, ibv_qp_attr* attr, int mask, ibv_qp_init_attr* init) {
  (void)mask;  // everything is reported, whatever the mask asks for
  Qp& qp = *qpOf(raw);
  std::lock_guard lock(qp.context->engine->mu);
  *attr = qp.attr;
  attr->qp_state = static_cast<ibv_qp_state>(raw->state);
  attr->cur_qp_state = attr->qp_state;
  attr->cap = qp.cap;
  if (init != nullptr) {
    std::memset(init, 0, sizeof(*init));
    init->qp_context = raw->qp_context;
    init->send_cq = raw->send_cq;
    init->recv_cq = raw->recv_cq;
    init->cap = qp.cap;
    init->qp_type = IBV_QPT_RC;
    init->sq_sig_all = qp.sigAll ? 1 : 0;
  }
  return 0;
}

int ibv_destroy_qp(ibv_qp* raw) {
  Qp* qp = qpOf(raw);
  Engine& engine = *qp->context->engine;
  std::lock_guard lock(engine.mu);
  // Outstanding work vanishes; completions of this QP still in its CQs are removed, as
  // rdma-core's providers clean the CQs of a destroyed QP.
  engine.detach(*qp);
  for (Cq* cq : {qp->sendCq, qp->recvCq}) {
    std::lock_guard cqLock(cq->mu);
    std::erase_if(cq->entries, [&](const ibv_wc& wc) { return wc.qp_num == raw->qp_num; });
  }
  engine.qps[qp->index] = nullptr;
  --qp->pd->qps;
  --qp->sendCq->qps;
  --qp->recvCq->qps;
  pthread_cond_destroy(&raw->cond);
  pthread_mutex_destroy(&raw->mutex);
  delete qp;
  return 0;
}

const char* ibv_wc_status_str(ibv_wc_status status) {
  switch (status) {
    case IBV_WC_SUCCESS:
      return "success";
    case IBV_WC_LOC_LEN_ERR:
      return "local length error";
    case IBV_WC_LOC_QP_OP_ERR:
      return "local QP operation error";
    case IBV_WC_LOC_EEC_OP_ERR:
      return "local EE context operation error";
    case IBV_WC_LOC_PROT_ERR:
      return "local protection error";
    case IBV_WC_WR_FLUSH_ERR:
      return "Work Request Flushed Error";
    case IBV_WC_MW_BIND_ERR:
      return "memory management operation error";
    case IBV_WC_BAD_RESP_ERR:
      return "bad response error";
    case IBV_WC_LOC_ACCESS_ERR:
      return "local access error";
    case IBV_WC_REM_INV_REQ_ERR:
      return "remote invalid request error";
    case IBV_WC_REM_ACCESS_ERR:
      return "remote access error";
    case IBV_WC_REM_OP_ERR:
      return "remote operation error";
    case IBV_WC_RETRY_EXC_ERR:
      return "transport retry counter exceeded";
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return "RNR retry counter exceeded";
    case IBV_WC_LOC_RDD_VIOL_ERR:
      return "local RDD violation error";
    case IBV_WC_REM_INV_RD_REQ_ERR:
      return "remote invalid RD request";
    case IBV_WC_REM_ABORT_ERR:
      return "aborted error";
    case IBV_WC_INV_EECN_ERR:
      return "invalid EE context number";
    case IBV_WC_INV_EEC_STATE_ERR:
      return "invalid EE context state";
    case IBV_WC_FATAL_ERR:
      return "fatal error";
    case IBV_WC_RESP_TIMEOUT_ERR:
      return "response timeout error";
    case IBV_WC_GENERAL_ERR:
      return "general error";
    default:
      return "unknown";
  }
}

}  // extern "C"
