// How a binding keeps the buffers of a call alive after its handle was dropped: the module's
// collx.Work and the torch backend's work handle hand their call here when they are
// destroyed before it ended, with what it borrows (arrays, tensors), and the call's memory
// stays borrowed until it ends. Dropping a handle never cancels its call.
//
// No pybind11 and no torch here: what a call holds is a std::shared_ptr<void>, and whatever
// releasing it needs (the GIL, for Python objects) is its destructor's business. Holds are
// released outside this class's lock, on the thread that sweeps or drains.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "collx/collectives.h"

namespace collx::bindings {

class InFlight {
 public:
  InFlight() = default;
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;
  // Drains: waits for the calls still held (each bounded by its own deadline).
  ~InFlight();

  // Keeps `held` until `work` has ended. Thread-safe, non-blocking.
  void adopt(Work work, std::shared_ptr<void> held);

  // Releases what the calls that have ended held. Non-blocking (Work::test); thread-safe.
  // Cheap when nothing is held.
  void sweep();

  // Waits for every call held (each bounded by its own deadline; their errors have no one
  // left to go to: the context keeps failing later calls with them), then releases what
  // they held. Thread-safe.
  void drain() noexcept;

  // How many calls are held.
  std::size_t size() const noexcept { return count_.load(std::memory_order_acquire); }

 private:
  using Entry = std::pair<Work, std::shared_ptr<void>>;
  // Takes every entry out, for testing or waiting outside the lock.
  std::vector<Entry> take();
  void putBack(std::vector<Entry>& entries);

  std::mutex mutex_;
  std::vector<Entry> calls_;
  std::atomic<std::size_t> count_{0};
};

}  // namespace collx::bindings
