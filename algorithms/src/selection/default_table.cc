// The built-in selection table: what select() takes when nothing else decides (selection.h
// lists the order). docs/performance.md, "Why the built-in table chooses what it does",
// has the measurements behind the rows.
#include "collx/algorithms/registry.h"
#include "collx/base/units.h"

namespace collx::algorithms {

// Every rank must pick the same row, so a row may depend on bytes only where every rank
// measures the same bytes (selectionBytes): the vector (allreduce, broadcast, reduce), one
// rank's block (gather, scatter, alltoall: equal blocks), the whole buffer (allgather(v),
// reduce_scatter); gatherv, scatterv and alltoallv get one row each. Shapes: allreduce
// takes the fewest steps for latency-bound sizes (recursive doubling), the fewest that
// still split the vector in the middle (halving-doubling), the ring for the largest; the
// rooted and blockwise collectives take one step (the root sends every rank its copy) up
// to a size, then log2 P steps; reduce_scatter, alltoall and allgatherv take their
// log-step algorithm up to a size and their P - 1 step one beyond it.
const std::vector<SelectionRule>& defaultSelection() {
  static constexpr std::uint64_t kAny = ~std::uint64_t{0};
  static constexpr int kMax = 1 << 30;
  static const std::vector<SelectionRule> kRules = {
      // Rows naming shm apply only when every rank shares memory with the others (the
      // selection skips them otherwise). At P = 2, allreduce from 512 KiB to 1 MiB takes
      // ring_chunked: its pieces of at most the eager limit go as two pipelined copies
      // through the pair's ring, ahead of shm's on the Zen 4 VM and the least loss on both.
      {Collective::kAllreduce, 2, 2, 512 * kKiB, kMiB, "ring_chunked", true},
      {Collective::kAllreduce, 2, kMax, 0, kAny, "shm"},
      {Collective::kReduceScatter, 2, kMax, 0, kAny, "shm"},
      // broadcast at P = 2 stays with shm from 64 KiB to 256 KiB: scatter_allgather is
      // ahead in quiet periods, 1.6x-2.6x behind when cores hand each other data slowly.
      {Collective::kBroadcast, 2, kMax, 0, kAny, "shm"},
      {Collective::kAllgather, 2, kMax, 0, kAny, "shm"},
      {Collective::kBarrier, 2, kMax, 0, kAny, "shm"},
      {Collective::kAllreduce, 1, 2, 0, 256 * kKiB, "recursive_doubling"},
      {Collective::kAllreduce, 1, 2, 0, kAny, "ring"},
      {Collective::kAllreduce, 3, 8, 0, 64 * kKiB, "recursive_doubling"},
      {Collective::kAllreduce, 3, 8, 0, 4 * kMiB, "halving_doubling"},
      {Collective::kAllreduce, 9, kMax, 0, 16 * kKiB, "recursive_doubling"},
      {Collective::kAllreduce, 9, kMax, 0, kMiB, "halving_doubling"},
      {Collective::kAllreduce, 1, kMax, 0, kAny, "ring"},
      // allgather: Open MPI's decision tree (coll_tuned_decision_fixed.c), by P and the
      // total bytes gathered (P x one rank's block); "total < X" is maxBytes X-1.
      {Collective::kAllgather, 2, 2, 0, kAny, "two_proc"},
      {Collective::kAllgather, 1, 31, 0, kAny, "recursive_doubling"},
      {Collective::kAllgather, 32, 63, 0, 1023, "recursive_doubling"},
      {Collective::kAllgather, 32, 63, 1024, 65535, "neighbor_exchange"},
      {Collective::kAllgather, 32, 63, 65536, kAny, "ring"},
      {Collective::kAllgather, 64, 127, 0, 511, "recursive_doubling"},
      {Collective::kAllgather, 64, 127, 512, 65535, "neighbor_exchange"},
      {Collective::kAllgather, 64, 127, 65536, kAny, "ring"},
      {Collective::kAllgather, 128, 255, 0, 511, "recursive_doubling"},
      {Collective::kAllgather, 128, 255, 512, 131071, "neighbor_exchange"},
      {Collective::kAllgather, 128, 255, 131072, 524287, "ring"},
      {Collective::kAllgather, 128, 255, 524288, 1048575, "neighbor_exchange"},
      {Collective::kAllgather, 128, 255, 1048576, kAny, "ring"},
      {Collective::kAllgather, 256, 511, 0, 31, "recursive_doubling"},
      {Collective::kAllgather, 256, 511, 32, 127, "bruck"},
      {Collective::kAllgather, 256, 511, 128, 1023, "recursive_doubling"},
      {Collective::kAllgather, 256, 511, 1024, 131071, "neighbor_exchange"},
      {Collective::kAllgather, 256, 511, 131072, 524287, "ring"},
      {Collective::kAllgather, 256, 511, 524288, 1048575, "neighbor_exchange"},
      {Collective::kAllgather, 256, 511, 1048576, kAny, "ring"},
      {Collective::kAllgather, 512, 1023, 0, 63, "recursive_doubling"},
      {Collective::kAllgather, 512, 1023, 64, 255, "bruck"},
      {Collective::kAllgather, 512, 1023, 256, 2047, "recursive_doubling"},
      {Collective::kAllgather, 512, 1023, 2048, kAny, "neighbor_exchange"},
      {Collective::kAllgather, 1024, 2047, 0, 3, "recursive_doubling"},
      {Collective::kAllgather, 1024, 2047, 4, 7, "bruck"},
      {Collective::kAllgather, 1024, 2047, 8, 15, "recursive_doubling"},
      {Collective::kAllgather, 1024, 2047, 16, 31, "bruck"},
      {Collective::kAllgather, 1024, 2047, 32, 255, "recursive_doubling"},
      {Collective::kAllgather, 1024, 2047, 256, 511, "bruck"},
      {Collective::kAllgather, 1024, 2047, 512, 4095, "recursive_doubling"},
      {Collective::kAllgather, 1024, 2047, 4096, kAny, "neighbor_exchange"},
      {Collective::kAllgather, 2048, 4095, 0, 31, "bruck"},
      {Collective::kAllgather, 2048, 4095, 32, 127, "recursive_doubling"},
      {Collective::kAllgather, 2048, 4095, 128, 511, "bruck"},
      {Collective::kAllgather, 2048, 4095, 512, 4095, "recursive_doubling"},
      {Collective::kAllgather, 2048, 4095, 4096, kAny, "neighbor_exchange"},
      {Collective::kAllgather, 4096, kMax, 0, 1, "recursive_doubling"},
      {Collective::kAllgather, 4096, kMax, 2, 7, "bruck"},
      {Collective::kAllgather, 4096, kMax, 8, 15, "recursive_doubling"},
      {Collective::kAllgather, 4096, kMax, 16, 511, "bruck"},
      {Collective::kAllgather, 4096, kMax, 512, 4095, "recursive_doubling"},
      {Collective::kAllgather, 4096, kMax, 4096, kAny, "neighbor_exchange"},
      {Collective::kBroadcast, 1, 2, 0, kAny, "one_to_all"},
      {Collective::kBroadcast, 3, 4, 0, 16 * kKiB, "one_to_all"},
      {Collective::kBroadcast, 5, 8, 0, 4 * kKiB, "one_to_all"},
      {Collective::kBroadcast, 3, kMax, 0, kAny, "binomial"},
      {Collective::kBarrier, 1, kMax, 0, kAny, "dissemination"},
      {Collective::kAllgatherv, 3, kMax, 0, 64 * kKiB, "bruck"},
      {Collective::kAllgatherv, 1, kMax, 0, kAny, "ring"},
      {Collective::kReduceScatter, 1, kMax, 0, 256 * kKiB, "recursive_halving"},
      {Collective::kReduceScatter, 1, kMax, 0, kAny, "ring"},
      // reduce over shared memory from the eager limit (256 KiB; at P = 3-4 above it),
      // where binomial's whole vectors wait for their receivers; over TCP binomial stays.
      {Collective::kReduce, 2, 2, 256 * kKiB, kAny, "reduce_scatter_gather", true},
      {Collective::kReduce, 3, 4, 256 * kKiB + 1, kAny, "reduce_scatter_gather", true},
      {Collective::kReduce, 1, kMax, 0, kAny, "binomial"},
      {Collective::kGather, 1, kMax, 0, kAny, "linear"},
      {Collective::kGatherv, 1, kMax, 0, kAny, "linear"},
      {Collective::kScatter, 1, kMax, 0, kAny, "linear"},
      {Collective::kScatterv, 1, kMax, 0, kAny, "linear"},
      {Collective::kAlltoall, 4, 4, 0, 1024, "bruck"},
      {Collective::kAlltoall, 5, kMax, 0, 8 * kKiB, "bruck"},
      {Collective::kAlltoall, 1, kMax, 0, kAny, "pairwise"},
      {Collective::kAlltoallv, 1, kMax, 0, kAny, "pairwise"},
  };
  return kRules;
}

}  // namespace collx::algorithms
