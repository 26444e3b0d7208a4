// collx-test-store-helper URL set KEY VALUE DELAY_MS | URL get KEY - DELAY_MS | serve PORT
// A second process for the store tests: sets a key after a delay, or waits for one and
// prints its value; or serves a TCP store on 127.0.0.1:PORT until it is killed (a server
// the tests can stop with SIGSTOP). With COLLX_JOB_SECRET(_FILE) set (a rank's environment
// under collx-run), it proves the job's secret, or asks for it.
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <thread>

#include "collx/base/config.h"
#include "collx/rendezvous/store.h"
#include "collx/rendezvous/tcp_store.h"
#include "collx/secure/job_secret.h"

namespace {

constexpr const char* kUsage =
    "usage: collx-test-store-helper URL set|get KEY VALUE DELAY_MS\n"
    "       collx-test-store-helper serve PORT   (a TCP store on 127.0.0.1:PORT until killed)\n";

[[noreturn]] void serve(const std::string& port) {
  auto options = collx::rendezvous::TcpStoreServer::Options::fromConfig(collx::Config::process());
  options.port = static_cast<std::uint16_t>(std::stoi(port));
  options.secret = collx::secure::JobSecret::fromConfig(collx::Config::process());
  collx::rendezvous::TcpStoreServer server(options);
  std::cout << server.url() << std::endl;
  while (true) ::pause();  // until a signal ends the process
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc == 3 && std::string(argv[1]) == "serve") serve(argv[2]);
    if (argc != 6) {
      std::cerr << kUsage;
      return 2;
    }
    collx::rendezvous::StoreOptions options;
    options.timeout = std::chrono::seconds(20);
    options.secret = collx::secure::JobSecret::fromConfig(collx::Config::process());
    auto store = collx::rendezvous::openStore(argv[1], options);
    std::this_thread::sleep_for(std::chrono::milliseconds(std::stoi(argv[5])));
    std::string op = argv[2];
    if (op == "set") {
      store->set(argv[3], std::string(argv[4]));
    } else if (op == "get") {
      std::cout << collx::rendezvous::toString(store->get(argv[3])) << std::endl;
    } else {
      std::cerr << "unknown op " << op << "\n" << kUsage;
      return 2;
    }
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  return 0;
}
