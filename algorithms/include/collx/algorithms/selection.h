// Selection: the algorithm a call gets when it names none. The rows of a rules file
// (COLLX_RULES) come first, then the built-in table (defaultSelection()); the first row whose
// rank and byte ranges hold picks. (An algorithm named in the call's options or in
// COLLX_<COLL>_ALGO wins over both: the API layer checks those first.)
//
// A rules file has the table's shape, per collective:
//   {
//     "allreduce": [
//       {"min_ranks": 1, "max_ranks": 8, "max_bytes": "64K", "algorithm": "recursive_doubling"},
//       {"algorithm": "ring"}
//     ],
//     "broadcast": [{"min_bytes": 1048576, "algorithm": "scatter_allgather"}]
//   }
// Every field but "algorithm" is optional (the whole range); byte bounds are numbers or
// strings with a K, M or G suffix (powers of 2) and are inclusive.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "collx/algorithms/registry.h"

namespace collx::algorithms {

class Selection {
 public:
  struct Row {
    Collective coll;
    int minRanks;
    int maxRanks;
    std::uint64_t minBytes;
    std::uint64_t maxBytes;
    const AlgorithmInfo* algorithm;
    std::string source;  // "default table" or "COLLX_RULES /path, allreduce entry 2"
    bool sharedOnly = false;  // only where every rank shares memory (SelectionRule)
  };

  // The built-in table only.
  Selection();
  // Rules from a file, then the built-in table. Throws InvalidArgument naming the file and
  // the entry: unreadable file, bad JSON, unknown collective or algorithm (listing the valid
  // ones), a range that is empty or out of order.
  static Selection fromFile(const std::string& path);
  static Selection fromJson(std::string_view text, const std::string& source);

  // The row that picks for a call (nullptr if none: the built-in table always has one).
  // Rows naming a shared-memory algorithm count only when `shared` (every rank of the call
  // shares memory with the others).
  const Row* choose(Collective coll, int ranks, std::uint64_t bytes, bool shared = false) const;
  // Every row of one collective, in the order they are tried.
  std::vector<const Row*> rows(Collective coll) const;

 private:
  std::vector<Row> rows_;
};


}  // namespace collx::algorithms
