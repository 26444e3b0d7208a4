#include "world.h"

#include <gtest/gtest.h>

#include "collx/base/log.h"

namespace collx::test {

std::string messageOf(const std::exception_ptr& error) {
  if (!error) return "";
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

World::World(int size, ContextOptions options) : size_(size), contexts_(size), errors_(size) {
  auto store = std::make_shared<rendezvous::HashStore>();
  if (!options.timeout) options.timeout = std::chrono::seconds(60);
  std::vector<std::thread> formers;
  std::vector<std::exception_ptr> failures(size);
  for (int r = 0; r < size; ++r) {
    formers.emplace_back([&, r] {
      log::ScopedLogRank tag(r);
      try {
        ContextOptions o = options;
        o.localRank = r;
        contexts_[r] = Context::create(store, r, size, o);
      } catch (...) {
        failures[r] = std::current_exception();
      }
    });
  }
  for (auto& t : formers) t.join();
  for (auto& f : failures) {
    if (f) std::rethrow_exception(f);
  }
  for (int r = 0; r < size; ++r) threads_.emplace_back([this, r] { loop(r); });
}

World::~World() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void World::loop(int rank) {
  log::ScopedLogRank tag(rank);
  std::uint64_t seen = 0;
  while (true) {
    const std::function<void(int, Context&)>* job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
    }
    std::exception_ptr error;
    try {
      (*job)(rank, *contexts_[rank]);
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      errors_[rank] = error;
      --running_;
    }
    cv_.notify_all();
  }
}

std::vector<std::exception_ptr> World::run(const std::function<void(int, Context&)>& job) {
  std::unique_lock<std::mutex> lock(mutex_);
  job_ = &job;
  running_ = size_;
  ++generation_;
  cv_.notify_all();
  cv_.wait(lock, [&] { return running_ == 0; });
  job_ = nullptr;
  return errors_;
}

void World::runOk(const std::function<void(int, Context&)>& job) {
  auto errors = run(job);
  for (int r = 0; r < size_; ++r) {
    if (errors[r]) ADD_FAILURE() << "rank " << r << ": " << messageOf(errors[r]);
  }
}

}  // namespace collx::test
