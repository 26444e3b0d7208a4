// A job of collx-test-worker processes as ranks, over a TCP store of its own: for the
// process tests (killed, stopped, disagreeing and shared-memory ranks).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "collx/rendezvous/tcp_store.h"
#include "util/test_util.h"

namespace collx::test {

class WorkerJob {
 public:
  using ArgsFor = std::function<std::vector<std::string>(int)>;
  using EnvFor = std::function<std::map<std::string, std::string>(int)>;

  // Rank r runs collx-test-worker with argsFor(r), its environment COLLX_RANK,
  // COLLX_WORLD_SIZE, COLLX_STORE, COLLX_JOB_ID = jobId and TEST_WORKER_DESCRIBE=1, to which
  // envFor(r) adds (or in which it replaces) variables.
  WorkerJob(int size, const std::string& jobId, const ArgsFor& argsFor, const EnvFor& envFor) {
    for (int r = 0; r < size; ++r) {
      std::vector<std::string> argv = {binDir() + "/collx-test-worker"};
      const std::vector<std::string> args = argsFor(r);
      argv.insert(argv.end(), args.begin(), args.end());
      std::map<std::string, std::string> env = {{"COLLX_RANK", std::to_string(r)},
                                                {"COLLX_WORLD_SIZE", std::to_string(size)},
                                                {"COLLX_STORE", server_.url()},
                                                {"COLLX_JOB_ID", jobId},
                                                {"TEST_WORKER_DESCRIBE", "1"}};
      for (auto& [name, value] : envFor(r)) env[name] = value;
      ranks_.push_back(std::make_unique<Process>(argv, env));
    }
  }

  Process& rank(int r) { return *ranks_[static_cast<std::size_t>(r)]; }
  int size() const { return static_cast<int>(ranks_.size()); }

  // Waits until every rank printed "ready" (false after 30 s).
  bool allReady() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      bool all = true;
      for (auto& p : ranks_) {
        p->wait(std::chrono::milliseconds(1));  // pumps its output
        all = all && p->out().find("ready") != std::string::npos;
      }
      if (all) return true;
    }
    return false;
  }

 private:
  rendezvous::TcpStoreServer server_;
  std::vector<std::unique_ptr<Process>> ranks_;
};

}  // namespace collx::test
