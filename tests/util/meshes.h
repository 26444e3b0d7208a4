// Meshes connected by hand, for the transport suites (transport_test, ibverbs_test): a
// request that records its completion, and every rank's mesh connected at once.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "collx/base/error.h"
#include "collx/transport/mesh.h"

namespace collx::test {

// A request that records its completion.
struct Done final : transport::Request {
  std::atomic<bool> finished{false};
  std::string error;
  void onComplete(const Error* e) override {
    if (e != nullptr) error = e->what();
    finished = true;
  }
};

// Makes a mesh per options (rank r: options[r]), lets `beforeConnect` meddle with their
// addresses, and connects them all, each from its own thread within 20 s. Throws naming the
// first rank that failed.
inline std::vector<std::unique_ptr<transport::Mesh>> connectMeshes(
    const std::vector<transport::MeshOptions>& options,
    const std::function<void(std::vector<std::string>&)>& beforeConnect = nullptr) {
  const int size = static_cast<int>(options.size());
  std::vector<std::unique_ptr<transport::Mesh>> meshes;
  std::vector<std::string> addresses;
  for (const auto& o : options) {
    meshes.push_back(std::make_unique<transport::Mesh>(o));
    addresses.push_back(meshes.back()->address());
  }
  if (beforeConnect) beforeConnect(addresses);
  std::vector<std::thread> threads;
  std::vector<std::string> errors(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        meshes[r]->connect(addresses, transport::Clock::now() + std::chrono::seconds(20));
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < size; ++r) {
    if (!errors[r].empty())
      throw std::runtime_error("rank " + std::to_string(r) + ": " + errors[r]);
  }
  return meshes;
}

}  // namespace collx::test
