#include "ibverbs/verbs_api.h"

#include <dlfcn.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "collx/base/log.h"
#include "collx/base/setting.h"
#include "collx/transport/options.h"

namespace collx::transport::ibverbs {

std::string libraryPath(const Config& config) { return MeshOptions::fromConfig(config).ib.library; }
namespace {

// The versions <infiniband/verbs.h> binds each entry point to (rdma-core's libibverbs.map:
// the completion channel functions exist at IBVERBS_1.0 only, every other one collx uses
// was redefined at IBVERBS_1.1).
constexpr const char* kV10 = "IBVERBS_1.0";
constexpr const char* kV11 = "IBVERBS_1.1";

template <typename F>
bool resolve(void* handle, const std::string& library, const char* name, const char* version,
             F& slot, std::string* why) {
  dlerror();  // clear: dlvsym's failure is only known through dlerror()
  void* symbol = dlvsym(handle, name, version);
  if (symbol == nullptr) {
    const char* error = dlerror();
    const std::string detail = error != nullptr ? error : "null symbol";
    // Named without a version: a library built without libibverbs' symbol versions (or
    // only with the old ABI), whose structures need not be the ones collx was built with.
    *why = library +
           (dlsym(handle, name) != nullptr
                ? " has " + std::string(name) + " but not at version " + version
                : " lacks " + std::string(name) + "@" + version) +
           " (" + detail + "): it is not a libibverbs of rdma-core";
    return false;
  }
  slot = reinterpret_cast<F>(symbol);
  return true;
}

std::string errnoText(int error) {
  return std::string(std::strerror(error)) + " (errno " + std::to_string(error) + ")";
}

}  // namespace

int VerbsApi::queryPort(ibv_context* context, std::uint8_t port, ibv_port_attr* attr) const {
  // verbs_get_ctx_op reads the context only: an rdma-core context is a verbs_context that
  // says so (abi_compat); any other library's is the plain ibv_context.
  if (verbs_context* extended = verbs_get_ctx_op(context, query_port); extended != nullptr) {
    return extended->query_port(context, port, attr, sizeof(*attr));
  }
  std::memset(attr, 0, sizeof(*attr));
  return queryPortSymbol(context, port, attr);
}

std::shared_ptr<const VerbsLibrary> VerbsLibrary::load(const std::string& path, std::string* why) {
  const std::string name = path.empty() ? kDefaultName : path;
  // RTLD_LOCAL: the library's ibv_* names never interpose on another copy in the process.
  void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* error = dlerror();
    *why = "cannot load " + name + ": " + (error != nullptr ? error : "dlopen failed") +
           (path.empty() ? " (rdma-core's libibverbs1 is not installed; COLLX_IBVERBS_LIBRARY "
                           "names another library)"
                         : " (COLLX_IBVERBS_LIBRARY)");
    return nullptr;
  }
  auto library = std::make_shared<VerbsLibrary>(Key{}, handle, name);
  VerbsApi& api = library->api_;
  const bool ok =
      resolve(handle, name, "ibv_get_device_list", kV11, api.getDeviceList, why) &&
      resolve(handle, name, "ibv_free_device_list", kV11, api.freeDeviceList, why) &&
      resolve(handle, name, "ibv_get_device_name", kV11, api.getDeviceName, why) &&
      resolve(handle, name, "ibv_open_device", kV11, api.openDevice, why) &&
      resolve(handle, name, "ibv_close_device", kV11, api.closeDevice, why) &&
      resolve(handle, name, "ibv_query_device", kV11, api.queryDevice, why) &&
      resolve(handle, name, "ibv_query_port", kV11, api.queryPortSymbol, why) &&
      resolve(handle, name, "ibv_query_gid", kV11, api.queryGid, why) &&
      resolve(handle, name, "ibv_alloc_pd", kV11, api.allocPd, why) &&
      resolve(handle, name, "ibv_dealloc_pd", kV11, api.deallocPd, why) &&
      resolve(handle, name, "ibv_reg_mr", kV11, api.regMr, why) &&
      resolve(handle, name, "ibv_dereg_mr", kV11, api.deregMr, why) &&
      resolve(handle, name, "ibv_create_comp_channel", kV10, api.createCompChannel, why) &&
      resolve(handle, name, "ibv_destroy_comp_channel", kV10, api.destroyCompChannel, why) &&
      resolve(handle, name, "ibv_create_cq", kV11, api.createCq, why) &&
      resolve(handle, name, "ibv_destroy_cq", kV11, api.destroyCq, why) &&
      resolve(handle, name, "ibv_get_cq_event", kV11, api.getCqEvent, why) &&
      resolve(handle, name, "ibv_ack_cq_events", kV11, api.ackCqEvents, why) &&
      resolve(handle, name, "ibv_create_qp", kV11, api.createQp, why) &&
      resolve(handle, name, "ibv_modify_qp", kV11, api.modifyQp, why) &&
      resolve(handle, name, "ibv_query_qp", kV11, api.queryQp, why) &&
      resolve(handle, name, "ibv_destroy_qp", kV11, api.destroyQp, why) &&
      resolve(handle, name, "ibv_wc_status_str", kV11, api.wcStatusStr, why);
  if (!ok) return nullptr;  // the destructor closes the handle
  return library;
}

VerbsLibrary::~VerbsLibrary() {
  if (dlclose(handle_) != 0) {
    const char* error = dlerror();
    COLLX_WARN(kIbverbs, "dlclose({}) failed: {}", name_, error != nullptr ? error : "?");
  }
}

DeviceList::DeviceList(std::shared_ptr<const VerbsLibrary> library) : library_(std::move(library)) {
  errno = 0;
  list_ = library_->api().getDeviceList(&count_);
  if (list_ == nullptr) {
    // libibverbs sets errno; a library that did not is still a failure, never "no devices".
    error_ = errno != 0 ? errno : EIO;
    count_ = 0;
  }
}

DeviceList::~DeviceList() {
  if (list_ != nullptr) library_->api().freeDeviceList(list_);
}

DeviceList::DeviceList(DeviceList&& other) noexcept { *this = std::move(other); }

DeviceList& DeviceList::operator=(DeviceList&& other) noexcept {
  if (this != &other) {
    if (list_ != nullptr) library_->api().freeDeviceList(list_);
    library_ = std::move(other.library_);
    list_ = std::exchange(other.list_, nullptr);
    count_ = std::exchange(other.count_, 0);
    error_ = std::exchange(other.error_, 0);
  }
  return *this;
}

std::string DeviceList::name(int i) const {
  const char* name = library_->api().getDeviceName(list_[i]);
  return name != nullptr ? name : "?";
}

VerbsProbe probeVerbs(const std::string& libraryPath) {
  VerbsProbe probe;
  probe.library = VerbsLibrary::load(libraryPath, &probe.unavailable);
  if (probe.library == nullptr) return probe;
  const std::string& name = probe.library->name();
  DeviceList list(probe.library);
  if (!list.ok()) {
    probe.unavailable = name + ": ibv_get_device_list failed: " + errnoText(list.error());
    if (list.error() == ENOSYS) {
      probe.unavailable +=
          ": this kernel offers no RDMA verbs (no ib_uverbs: no InfiniBand or RoCE driver, "
          "nor rdma_rxe)";
    }
    return probe;
  }
  for (int i = 0; i < list.size(); ++i) probe.devices.push_back(list.name(i));
  if (probe.devices.empty()) probe.unavailable = name + " found no RDMA device";
  return probe;
}

namespace {
std::atomic<std::uint64_t> gDestroyFailures{0};
}

std::uint64_t destroyFailures() noexcept { return gDestroyFailures.load(); }

void logDestroyFailure(const char* what, int error) noexcept {
  gDestroyFailures.fetch_add(1);
  COLLX_WARN(kIbverbs, "destroying the {} failed: {}; it is leaked", what, errnoText(error));
}

}  // namespace collx::transport::ibverbs
