// Harness: the selection rules file (COLLX_RULES) through Selection::fromJson.
#include "collx/algorithms/selection.h"
#include "fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using collx::algorithms::Selection;
  collx::fuzz::refusedOrParsed([&] {
    const Selection s = Selection::fromJson(collx::fuzz::textOf(data, size), "fuzz.json");
    // What a job does with the rows: choose one for a few calls.
    for (collx::algorithms::Collective coll : collx::algorithms::collectives()) {
      for (int ranks : {1, 2, 7, 64}) {
        for (std::uint64_t bytes : {std::uint64_t{0}, std::uint64_t{4096}, ~std::uint64_t{0}}) {
          const Selection::Row* row = s.choose(coll, ranks, bytes, ranks % 2 == 0);
          if (row != nullptr && row->algorithm->coll != coll) __builtin_trap();
        }
      }
    }
  });
  return 0;
}
