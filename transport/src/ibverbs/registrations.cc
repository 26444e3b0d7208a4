#include "ibverbs/registrations.h"

#include <cerrno>
#include <cstring>

#include "collx/base/log.h"

namespace collx::transport::ibverbs {

namespace {
constexpr int kAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
}

Registrations::Registrations(std::shared_ptr<const VerbsLibrary> library, ibv_pd* pd)
    : library_(std::move(library)), pd_(pd) {}

Registrations::~Registrations() = default;

Registrations::Handle Registrations::acquire(void* address, std::uint64_t length,
                                             std::string* why) {
  ibv_mr* mr = library_->api().regMr(pd_, address, length, kAccess);
  if (mr == nullptr) {
    const int error = errno;
    *why = "ibv_reg_mr of " + std::to_string(length) + " bytes failed: " + std::strerror(error);
    if (error == ENOMEM || error == EAGAIN) {
      *why += " (the locked-memory limit, ulimit -l, may be too low)";
    }
    return {};
  }
  return Handle{mr};
}

void Registrations::release(Handle& handle) noexcept {
  if (handle.mr == nullptr) return;
  if (int rc = library_->api().deregMr(handle.mr); rc != 0) {
    logDestroyFailure("memory region", rc);
  }
  handle.mr = nullptr;
}

}  // namespace collx::transport::ibverbs
