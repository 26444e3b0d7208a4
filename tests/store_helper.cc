// collx-test-store-helper URL set KEY VALUE DELAY_MS | URL get KEY - DELAY_MS
// A second process for the store tests: sets a key after a delay, or waits for one and
// prints its value.
#include <chrono>
#include <iostream>
#include <thread>

#include "collx/rendezvous/store.h"

int main(int argc, char** argv) {
  if (argc != 6) {
    std::cerr << "usage: collx-test-store-helper URL set|get KEY VALUE DELAY_MS\n";
    return 2;
  }
  try {
    collx::rendezvous::StoreOptions options;
    options.timeout = std::chrono::seconds(20);
    auto store = collx::rendezvous::openStore(argv[1], options);
    std::this_thread::sleep_for(std::chrono::milliseconds(std::stoi(argv[5])));
    std::string op = argv[2];
    if (op == "set") {
      store->set(argv[3], std::string(argv[4]));
    } else if (op == "get") {
      std::cout << collx::rendezvous::toString(store->get(argv[3])) << std::endl;
    } else {
      std::cerr << "unknown op " << op << "\n";
      return 2;
    }
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  return 0;
}
