// The RDMA verbs entry points collx calls, loaded at run time (internal).
//
// collx never links libibverbs: one build runs on machines without rdma-core. Only the
// header <infiniband/verbs.h> (libibverbs-dev) is used at build time, for the types. At run
// time VerbsLibrary dlopen()s `libibverbs.so.1`, or the library the caller names (the value
// of COLLX_IBVERBS_LIBRARY: e.g. tests/verbs_emu's userspace device), and resolves each
// entry point below at the symbol version that <infiniband/verbs.h> itself binds to.
//
// Why versions: libibverbs exports most functions twice, IBVERBS_1.0 (the pre-2006 ABI, with
// other structure layouts) and IBVERBS_1.1. A program linked against libibverbs gets 1.1
// through the header; dlsym() would return the default version too, but dlvsym() states it,
// so a library that offers only the old ABI is refused instead of corrupting memory.
// Three names in the header are macros over inline functions rather than the exported
// symbols: ibv_get_device_list (registers static providers first: nothing for a dlopen()ed
// library), ibv_reg_mr (calls ibv_reg_mr_iova2 for IBV_ACCESS_OPTIONAL_RANGE flags, which
// collx does not use) and ibv_query_port (see VerbsApi::queryPort). The data path
// (post_send, post_recv, poll_cq, req_notify_cq) is inline in the header too: it calls
// through the context's ops table and needs no symbol at all.
//
// Threading: a loaded VerbsApi is immutable; its functions are the library's, with the
// library's thread safety (verbs objects may be used from any thread).
#pragma once

#include <infiniband/verbs.h>

#include <cerrno>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "collx/base/config.h"

namespace collx::transport::ibverbs {

// The exported functions collx calls (names: ibv_<name> in snake_case) and the inline ones
// of the data path. Every pointer is set once a VerbsLibrary loaded; return conventions are
// libibverbs' (see each man page: most return 0 or an errno value, pointers null with errno).
struct VerbsApi {
  ibv_device** (*getDeviceList)(int* count) = nullptr;
  void (*freeDeviceList)(ibv_device** list) = nullptr;
  const char* (*getDeviceName)(ibv_device* device) = nullptr;
  ibv_context* (*openDevice)(ibv_device* device) = nullptr;
  int (*closeDevice)(ibv_context* context) = nullptr;
  int (*queryDevice)(ibv_context* context, ibv_device_attr* attr) = nullptr;
  int (*queryGid)(ibv_context* context, std::uint8_t port, int index, ibv_gid* gid) = nullptr;
  ibv_pd* (*allocPd)(ibv_context* context) = nullptr;
  int (*deallocPd)(ibv_pd* pd) = nullptr;
  ibv_mr* (*regMr)(ibv_pd* pd, void* addr, std::size_t length, int access) = nullptr;
  int (*deregMr)(ibv_mr* mr) = nullptr;
  ibv_comp_channel* (*createCompChannel)(ibv_context* context) = nullptr;
  int (*destroyCompChannel)(ibv_comp_channel* channel) = nullptr;
  ibv_cq* (*createCq)(ibv_context* context, int cqe, void* cqContext, ibv_comp_channel* channel,
                      int compVector) = nullptr;
  int (*destroyCq)(ibv_cq* cq) = nullptr;
  int (*getCqEvent)(ibv_comp_channel* channel, ibv_cq** cq, void** cqContext) = nullptr;
  void (*ackCqEvents)(ibv_cq* cq, unsigned int events) = nullptr;
  ibv_qp* (*createQp)(ibv_pd* pd, ibv_qp_init_attr* attr) = nullptr;
  int (*modifyQp)(ibv_qp* qp, ibv_qp_attr* attr, int mask) = nullptr;
  int (*queryQp)(ibv_qp* qp, ibv_qp_attr* attr, int mask, ibv_qp_init_attr* init) = nullptr;
  int (*destroyQp)(ibv_qp* qp) = nullptr;
  const char* (*wcStatusStr)(ibv_wc_status status) = nullptr;

  // ibv_query_port as the header's inline ___ibv_query_port does it: through the extended
  // context's query_port when the library provides one (rdma-core's, with the size of the
  // caller's structure), else the exported IBVERBS_1.1 symbol, which fills only the fields of
  // the older, shorter structure (_compat_ibv_port_attr): the rest stays zero.
  int queryPort(ibv_context* context, std::uint8_t port, ibv_port_attr* attr) const;

  // The data path: the header's inline functions (the context's ops table).
  static int postSend(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
    return ibv_post_send(qp, wr, bad);
  }
  static int postRecv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) {
    return ibv_post_recv(qp, wr, bad);
  }
  static int pollCq(ibv_cq* cq, int entries, ibv_wc* wc) { return ibv_poll_cq(cq, entries, wc); }
  static int reqNotifyCq(ibv_cq* cq, bool solicitedOnly) {
    return ibv_req_notify_cq(cq, solicitedOnly ? 1 : 0);
  }

  // int (*queryPort)(..., _compat_ibv_port_attr*) as exported; use queryPort().
  int (*queryPortSymbol)(ibv_context* context, std::uint8_t port, void* attr) = nullptr;
};

// A verbs library loaded with dlopen(): the handle and the entry points resolved from it.
// Unloaded (dlclose) with the last reference: every context opened through it must be closed
// by then (a provider's threads and ops tables live in its code).
class VerbsLibrary {
 public:
  static constexpr const char* kDefaultName = "libibverbs.so.1";

  // Loads `path` (empty: kDefaultName through the dynamic linker's search path) and resolves
  // every entry point. Null when that is impossible, with the reason in `*why` (the library
  // cannot be opened, or it lacks an entry point at the version collx needs). Never throws
  // for an absent or broken library.
  static std::shared_ptr<const VerbsLibrary> load(const std::string& path, std::string* why);

  ~VerbsLibrary();
  VerbsLibrary(const VerbsLibrary&) = delete;
  VerbsLibrary& operator=(const VerbsLibrary&) = delete;

  const VerbsApi& api() const noexcept { return api_; }
  // What was loaded: the path given, or kDefaultName.
  const std::string& name() const noexcept { return name_; }

 private:
  struct Key {};  // only load() makes one

 public:
  VerbsLibrary(Key, void* handle, std::string name) : handle_(handle), name_(std::move(name)) {}

 private:
  void* handle_;
  std::string name_;
  VerbsApi api_;
};

// Whether verbs can be used here: the loaded library and the names of its devices, or why not.
struct VerbsProbe {
  std::shared_ptr<const VerbsLibrary> library;  // null when no library could be loaded
  std::vector<std::string> devices;             // in the library's order
  std::string unavailable;  // why verbs cannot be used (empty when devices were found)

  bool usable() const noexcept { return unavailable.empty(); }
};

// Loads `libraryPath` (empty: libibverbs.so.1) and lists its devices. Never throws and never
// crashes for a missing library, a library without the entry points, a kernel without RDMA
// (ibv_get_device_list fails with ENOSYS: no ib_uverbs) or a machine without devices: each
// is a sentence in `unavailable` that names the library.
VerbsProbe probeVerbs(const std::string& libraryPath);

// COLLX_IBVERBS_LIBRARY in `config` ("" when unset: libibverbs.so.1), for load()/probeVerbs().
std::string libraryPath(const Config& config);

// The devices of a library, freed (ibv_free_device_list) when this goes away. Move-only.
class DeviceList {
 public:
  // Null list and `error` = errno when ibv_get_device_list failed.
  explicit DeviceList(std::shared_ptr<const VerbsLibrary> library);
  ~DeviceList();
  DeviceList(DeviceList&& other) noexcept;
  DeviceList& operator=(DeviceList&& other) noexcept;
  DeviceList(const DeviceList&) = delete;
  DeviceList& operator=(const DeviceList&) = delete;

  bool ok() const noexcept { return list_ != nullptr; }
  int error() const noexcept { return error_; }  // errno of a failed ibv_get_device_list
  int size() const noexcept { return count_; }
  ibv_device* operator[](int i) const noexcept { return list_[i]; }
  std::string name(int i) const;

 private:
  std::shared_ptr<const VerbsLibrary> library_;
  ibv_device** list_ = nullptr;
  int count_ = 0;
  int error_ = 0;
};

// A verbs object owned by this handle and destroyed with its library's destroy function
// (ibv_close_device, ibv_dealloc_pd, ibv_dereg_mr, ibv_destroy_comp_channel, ibv_destroy_cq,
// ibv_destroy_qp). Move-only. Destroy objects in the reverse order of their creation (QPs,
// then CQs, then channels, MRs, PDs, the context): a verbs library refuses to destroy an
// object that another still uses (EBUSY).
template <typename T>
class VerbsObject {
 public:
  using DestroyFn = int (*)(T*);

  VerbsObject() = default;
  VerbsObject(std::shared_ptr<const VerbsLibrary> library, T* raw, DestroyFn destroyFn,
              const char* what) noexcept
      : library_(std::move(library)), raw_(raw), destroy_(destroyFn), what_(what) {}
  // Destroys the object; a failure is logged (collx.ibverbs), never thrown.
  ~VerbsObject() { destroyLogged(); }
  VerbsObject(VerbsObject&& other) noexcept { *this = std::move(other); }
  VerbsObject& operator=(VerbsObject&& other) noexcept {
    if (this != &other) {
      destroyLogged();
      library_ = std::move(other.library_);
      raw_ = std::exchange(other.raw_, nullptr);
      destroy_ = other.destroy_;
      what_ = other.what_;
    }
    return *this;
  }
  VerbsObject(const VerbsObject&) = delete;
  VerbsObject& operator=(const VerbsObject&) = delete;

  T* get() const noexcept { return raw_; }
  T* operator->() const noexcept { return raw_; }
  explicit operator bool() const noexcept { return raw_ != nullptr; }

  // Destroys the object now and returns the library's result: 0, or (it failed and the
  // handle still owns the object) an errno value.
  int destroy() noexcept {
    if (raw_ == nullptr) return 0;
    int rc = destroy_(raw_);
    // ibv_close_device returns -1 with errno; the others return the errno value itself.
    if (rc == -1) rc = errno;
    if (rc == 0) raw_ = nullptr;
    return rc;
  }

 private:
  void destroyLogged() noexcept;

  std::shared_ptr<const VerbsLibrary> library_;  // keeps the code of destroy_ loaded
  T* raw_ = nullptr;
  DestroyFn destroy_ = nullptr;
  const char* what_ = "";
};

// Logs a failed destroy in a destructor (defined in verbs_api.cc: keeps spdlog out of here).
void logDestroyFailure(const char* what, int error) noexcept;
// How many destroys failed in this process (a verbs object leaked: destroyed out of order,
// or still in use): tests check that every path leaves none.
std::uint64_t destroyFailures() noexcept;

template <typename T>
void VerbsObject<T>::destroyLogged() noexcept {
  const int rc = destroy();
  if (rc != 0) {
    logDestroyFailure(what_, rc);
    raw_ = nullptr;  // leaked: the library refused, and a destructor cannot retry later
  }
  library_.reset();
}

using Context = VerbsObject<ibv_context>;
using ProtectionDomain = VerbsObject<ibv_pd>;
using MemoryRegion = VerbsObject<ibv_mr>;
using CompletionChannel = VerbsObject<ibv_comp_channel>;
using CompletionQueue = VerbsObject<ibv_cq>;
using QueuePair = VerbsObject<ibv_qp>;

}  // namespace collx::transport::ibverbs
