#include "in_flight.h"

namespace collx::bindings {

InFlight::~InFlight() { drain(); }

void InFlight::adopt(Work work, std::shared_ptr<void> held) {
  if (!work.valid()) return;  // no call: nothing to wait for
  std::lock_guard<std::mutex> lock(mutex_);
  calls_.emplace_back(std::move(work), std::move(held));
  count_.fetch_add(1, std::memory_order_release);
}

std::vector<InFlight::Entry> InFlight::take() {
  std::vector<Entry> taken;
  std::lock_guard<std::mutex> lock(mutex_);
  taken.swap(calls_);
  return taken;
}

void InFlight::putBack(std::vector<Entry>& entries) {
  if (entries.empty()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  for (Entry& e : entries) calls_.push_back(std::move(e));
}

void InFlight::sweep() {
  if (size() == 0) return;
  std::vector<Entry> taken = take();
  std::vector<Entry> running;
  std::size_t ended = 0;
  for (Entry& e : taken) {
    if (e.first.test()) {
      e = Entry();  // releases the hold here, outside the lock
      ++ended;
    } else {
      running.push_back(std::move(e));
    }
  }
  putBack(running);
  count_.fetch_sub(ended, std::memory_order_release);
}

void InFlight::drain() noexcept {
  while (size() > 0) {
    std::vector<Entry> taken = take();
    if (taken.empty()) return;  // another thread drains what is left
    for (Entry& e : taken) {
      try {
        e.first.wait();
      } catch (...) {
        // The call's error: nobody is left to receive it.
      }
      e = Entry();
    }
    count_.fetch_sub(taken.size(), std::memory_order_release);
  }
}

}  // namespace collx::bindings
