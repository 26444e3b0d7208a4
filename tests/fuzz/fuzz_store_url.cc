// Harness: store URLs (COLLX_STORE, collx-run's --store) through StoreUrl::parse, and what it
// accepts through str() and back.
#include "collx/rendezvous/store.h"
#include "fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using collx::rendezvous::StoreUrl;
  collx::fuzz::refusedOrParsed([&] {
    const StoreUrl url = StoreUrl::parse(std::string(collx::fuzz::textOf(data, size)));
    // Whatever parse() accepts, str() writes a URL that parses to the same fields.
    const StoreUrl again = StoreUrl::parse(url.str());
    if (again.scheme != url.scheme || again.host != url.host || again.port != url.port ||
        again.path != url.path || again.db != url.db || again.user != url.user ||
        again.password != url.password) {
      __builtin_trap();
    }
  });
  return 0;
}
