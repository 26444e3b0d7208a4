#include "world.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstdlib>
#include <map>

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

namespace {

std::uint64_t streamsPerPeer() {
  const char* env = std::getenv("COLLX_TCP_STREAMS");
  const long n = env != nullptr ? std::strtol(env, nullptr, 10) : 1;
  return n > 0 ? static_cast<std::uint64_t>(n) : 1;
}

}  // namespace

bool worldsShareMemory() {
  const char* transport = std::getenv("COLLX_TRANSPORT");
  return transport == nullptr || std::string(transport) == "auto" ||
         std::string(transport) == "shm";
}

std::vector<std::string> algorithmsOf(algorithms::Collective coll) {
  std::vector<std::string> out;
  for (const auto& info : algorithms::algorithmRegistry()) {
    if (info.coll == coll && (!info.shared || worldsShareMemory())) out.push_back(info.name);
  }
  return out;
}

std::string ensureFilesFor(int size) {
  // Every rank: a socket per peer and stream, a listener, a few more; plus this process's
  // other worlds (worldOf keeps the small ones) and what gtest and the store hold.
  const auto P = static_cast<std::uint64_t>(size);
  const std::uint64_t need = P * (P * streamsPerPeer() + 8) + 2048;
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return "getrlimit(RLIMIT_NOFILE) failed";
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < need) {
    if (limit.rlim_max != RLIM_INFINITY && limit.rlim_max < need) {
      return "a world of " + std::to_string(size) + " thread ranks needs about " +
             std::to_string(need) + " open files; the hard limit here is " +
             std::to_string(limit.rlim_max) + " (raise it with ulimit -Hn)";
    }
    limit.rlim_cur = need;
    if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) return "setrlimit(RLIMIT_NOFILE) failed";
  }
  return "";
}

World& worldOf(int size) {
  // Small worlds stay for the other tests of this process; a large one replaces the last.
  static std::map<int, std::unique_ptr<World>> worlds;
  if (size > kFullSweepMaxSize + 1) {
    std::erase_if(
        worlds, [&](const auto& w) { return w.first > kFullSweepMaxSize + 1 && w.first != size; });
  }
  auto& world = worlds[size];
  if (!world) {
    const std::string why = ensureFilesFor(size);
    if (!why.empty()) throw std::runtime_error(why);
    world = std::make_unique<World>(size);
  }
  return *world;
}

World::World(int size, ContextOptions options, std::vector<std::string> hostIds,
             std::shared_ptr<rendezvous::Store> given)
    : size_(size), contexts_(size), errors_(size) {
  store_ = given ? std::move(given) : std::make_shared<rendezvous::HashStore>();
  auto store = store_;
  if (!options.timeout) options.timeout = std::chrono::seconds(60);
  std::vector<std::thread> formers;
  std::vector<std::exception_ptr> failures(size);
  for (int r = 0; r < size; ++r) {
    formers.emplace_back([&, r] {
      log::ScopedLogRank tag(r);
      try {
        ContextOptions o = options;
        o.localRank = r;
        if (!hostIds.empty()) o.hostId = hostIds[r];
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
      if (contexts_[rank]) (*job)(rank, *contexts_[rank]);  // (not on a rank closed)
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
