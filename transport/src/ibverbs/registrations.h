// Registrations: user buffers registered with the RDMA device (memory regions) for the time a
// message needs them (internal).
//
// Every registration allows local and remote writes: a receive buffer's rkey goes to the peer
// in READY, a send buffer's lkey is used by the RDMA WRITE that pushes it. Only receive
// buffers' keys ever leave this rank.
//
// Threading: used by the thread that drives the mesh's progress only.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>
#include <string>

#include "ibverbs/verbs_api.h"

namespace collx::transport::ibverbs {

class Registrations {
 public:
  struct Handle {
    ibv_mr* mr = nullptr;
    explicit operator bool() const noexcept { return mr != nullptr; }
    std::uint32_t lkey() const noexcept { return mr->lkey; }
    std::uint32_t rkey() const noexcept { return mr->rkey; }
  };

  Registrations(std::shared_ptr<const VerbsLibrary> library, ibv_pd* pd);
  ~Registrations();
  Registrations(const Registrations&) = delete;
  Registrations& operator=(const Registrations&) = delete;

  // Registers [address, address + length). Null with `*why` (the library's errno text) when
  // the device refuses (memory not mapped, the locked-memory limit reached, ...).
  Handle acquire(void* address, std::uint64_t length, std::string* why);
  // The handle's memory is no longer used by the device; `handle` is reset.
  void release(Handle& handle) noexcept;

 private:
  std::shared_ptr<const VerbsLibrary> library_;
  ibv_pd* pd_;
};

}  // namespace collx::transport::ibverbs
