// Selection: which algorithm a call runs. select() owns every rule, in this order:
//   1. the algorithm named in the call's options;
//   2. COLLX_<COLL>_ALGO;
//   3. the rows of a rules file (COLLX_RULES);
//   4. the host rule: where the job spans hosts and some host has several ranks, the
//      collective's algorithm marked acrossHosts (hierarchical);
//   5. the rows of the built-in table (defaultSelection());
//   6. the first registered algorithm that can take the call (a non-commutative op where no
//      row names one that keeps rank order).
// Rows match a call by P and by selectionBytes() (the same on every rank), and count only
// where their algorithm can take the call (AlgorithmInfo's prerequisites: shared memory,
// rank order); an algorithm named by 1 or 2 that cannot is an InvalidArgument saying why.
// The API, collx-bench, collx-sim and the hierarchical algorithms' phases all choose here.
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
// strings with a K, M or G suffix (powers of 2) and are inclusive. "shared_memory": true
// makes a row count only where every rank of the call shares memory with the others (the
// shm transport), false only where they do not (tcp, ibverbs); absent, both. "max_hosts": N
// makes it count only in jobs on at most N hosts (collx-tune's rows say 1: what one host
// measured says nothing of a job across hosts, whose host rule then applies).
//
// Where the rules come from: COLLX_RULES=/path (none: no file), or else the first of
// $XDG_CONFIG_HOME/collx/rules.json (~/.config/collx/rules.json) and
// /etc/collx/rules.json that exists: where collx-tune writes what it measured, so that a
// machine tuned once stays tuned.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "collx/algorithms/registry.h"
#include "collx/base/data_type.h"
#include "collx/base/reduce_op.h"

namespace collx {
class Config;
}

namespace collx::algorithms {

// A rules file's bounds: its size, how deep its JSON nests, how many rules it has, and how
// much of a value an error repeats.
inline constexpr std::size_t kMaxRulesFileBytes = std::size_t{1} << 20;
inline constexpr int kMaxRulesDepth = 8;
inline constexpr std::size_t kMaxRules = 10000;
inline constexpr std::size_t kRulesEchoBytes = 80;

// The rows of a rules file followed by the built-in table's.
class Selection {
 public:
  struct Row {
    Collective coll;
    int minRanks;
    int maxRanks;
    std::uint64_t minBytes;
    std::uint64_t maxBytes;
    const AlgorithmInfo* algorithm;
    std::string source;       // "default table" or "COLLX_RULES /path, allreduce entry 2"
    bool sharedOnly = false;  // only where every rank shares memory (SelectionRule)
    bool builtIn = true;      // a row of defaultSelection(), not of a rules file
    bool notShared = false;   // only where the ranks do not all share memory
    int maxHosts = 1 << 30;   // only in jobs on at most this many hosts

    bool holds(int ranks, std::uint64_t bytes) const noexcept {
      return ranks >= minRanks && ranks <= maxRanks && bytes >= minBytes && bytes <= maxBytes;
    }
  };

  // The built-in table only.
  Selection();
  // The built-in table, built once.
  static const Selection& builtIn();
  // Rules from a file, then the built-in table. Throws InvalidArgument naming the file and
  // the entry: unreadable file, bad JSON, unknown collective or algorithm (listing the valid
  // ones), a range that is empty or out of order, a file beyond the bounds above.
  // `origin` says how the file was found, in errors and rows' sources ("COLLX_RULES", or
  // "rules file" for one found in a default place).
  static Selection fromFile(const std::string& path, std::string_view origin = "COLLX_RULES");
  static Selection fromJson(std::string_view text, const std::string& source);
  // The rules file a configuration names (COLLX_RULES), or the first default place that
  // holds one; "" for none. `origin` is set to how it was found.
  static std::string rulesPath(const Config& config, std::string* origin = nullptr);

  // The first row of `coll` whose ranges hold in a job of one host (nullptr if none: the
  // built-in table always has one). Rows naming a shared-memory algorithm, or marked sharedOnly,
  // count only when `shared` (every rank of the call shares memory with the others).
  const Row* choose(Collective coll, int ranks, std::uint64_t bytes, bool shared = false) const;
  // Every row of one collective, in the order they are tried.
  const std::vector<Row>& rows(Collective coll) const noexcept {
    return rows_[static_cast<std::size_t>(coll) % kCollectiveSlots];
  }

 private:
  std::array<std::vector<Row>, kCollectiveSlots> rows_;
};

// What selection knows of the job a call runs in, besides the call (the same on every rank):
// read once per context.
struct SelectionPolicy {
  // The rows: COLLX_RULES followed by the built-in table (owned by `rules`), or the built-in
  // table alone.
  std::shared_ptr<const Selection> rules;
  const Selection* table = &Selection::builtIn();
  // The rules file read ("" for none), and how it was found ("COLLX_RULES", "rules file").
  std::string rulesPath;
  std::string rulesOrigin;
  // COLLX_<COLL>_ALGO by Collective value (nullptr: unset).
  std::array<const AlgorithmInfo*, kCollectiveSlots> configured{};
  // Every rank of the job shares memory with every other (the shared-memory algorithms run).
  bool sharedMemory = false;
  // The number of hosts the job's ranks are on (the host rule).
  int hosts = 1;
  // A sub-context (Context::split): it has a shared-memory group only where its split got one
  // (sharedMemory), whatever its size.
  bool subContext = false;

  // COLLX_RULES and every COLLX_<COLL>_ALGO from `config`. Throws InvalidArgument naming the
  // variable (an algorithm name that is not one of the collective's) or the rules file.
  static SelectionPolicy fromConfig(const Config& config, bool sharedMemory, int hosts);
};

struct Choice {
  const AlgorithmInfo* algorithm = nullptr;
  // Which rule chose it, for the debug log: "options", "COLLX_ALLREDUCE_ALGO", a row's source,
  // "default table (hosts)", "registry".
  const char* source = "";
};

// The bytes the rows of a call's collective are matched against (registry.h lists them).
std::uint64_t selectionBytes(const ScheduleParams& params) noexcept;

// The algorithm this rank runs for a call with `params` (rank and size as the schedule's;
// hostOf is not read: policy.hosts says whether the job spans hosts). `named`: the call's
// option ("" for none); `op`, when the call reduces: named in errors. Throws
// InvalidArgument (rank and collective named) when `named` or COLLX_<COLL>_ALGO names an
// unknown algorithm or one that cannot take the call, Unsupported when nothing can. No
// allocation unless it throws: it runs on every call.
Choice select(const ScheduleParams& params, const SelectionPolicy& policy,
              std::string_view named = {}, const ReduceOp* op = nullptr);

// Every algorithm of the call's collective that can take it in this job (the prerequisites
// select() checks for a named one), in registry order: what collx-bench -a all runs.
std::vector<const AlgorithmInfo*> eligibleAlgorithms(const ScheduleParams& params,
                                                     const SelectionPolicy& policy);

// A call of equal blocks, as collx-sim models one and collx-bench runs one: `count` elements
// in the whole vector (allreduce, reduce, broadcast) or in one rank's block (the others;
// alltoall(v): the block for each peer); the v-collectives' blocks equal and in rank order.
struct UniformCall {
  Collective coll = Collective::kAllreduce;
  int ranks = 1;
  std::uint64_t count = 0;
  DataType dtype = DataType::kFloat32;
  ReduceOpKind op = ReduceOpKind::kSum;
  int root = 0;
  bool inPlace = false;
  std::uint64_t chunkBytes = kChunkBytes.defaultValue();
};
// Rank `rank`'s params for such a call, as the API would make them (alltoallv: with the
// count matrix its bruck algorithm needs).
ScheduleParams paramsOf(const UniformCall& call, int rank);
// The algorithm such a call takes where nothing names one for it (rank 0's choice, which
// is every rank's): what collx-sim marks as the default and collx-bench prints.
Choice defaultChoice(const UniformCall& call, const SelectionPolicy& policy);

// "COLLX_ALLREDUCE_ALGO": the variable that names a collective's algorithm.
const char* algorithmVariable(Collective coll) noexcept;

}  // namespace collx::algorithms
