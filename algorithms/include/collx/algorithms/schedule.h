// Schedule: a collective written once, independent of transports, as a DAG of tasks
// (send, recv, reduce, copy, divide) with the tasks each depends on (as MPICH's
// transport-independent schedules: src/mpi/coll/transports/gentran). Buffers are named, not
// pointers, so that one schedule serves every call with the same key: the engine binds
// input, output and scratch.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

namespace collx::algorithms {

struct ScheduleParams;

enum class Buffer : std::uint8_t { kInput, kOutput, kScratch };

// A byte offset into one of the call's buffers.
struct BufferRef {
  Buffer buffer = Buffer::kOutput;
  std::uint64_t offset = 0;
};

inline BufferRef input(std::uint64_t offset = 0) { return {Buffer::kInput, offset}; }
inline BufferRef output(std::uint64_t offset = 0) { return {Buffer::kOutput, offset}; }
inline BufferRef scratch(std::uint64_t offset = 0) { return {Buffer::kScratch, offset}; }

enum class TaskKind : std::uint8_t {
  kSend,    // src, bytes -> peer (message step `step`)
  kRecv,    // peer (step) -> dst, bytes
  kReduce,  // dst = a (op) b over `count` elements (dst may be a or b)
  kCopy,    // dst <- src, bytes
  kDivide,  // dst /= the number of ranks over `count` elements (ReduceOp avg)
  kShared,  // a collective on shared memory directly (algorithms/shared.h), resumed by the
            // engine until it ends: Schedule::sharedParams() says which
};

struct Task {
  TaskKind kind = TaskKind::kCopy;
  int peer = -1;
  std::uint32_t step = 0;
  BufferRef dst;
  BufferRef src;  // send: the bytes; copy: the source; reduce: operand b
  BufferRef a;    // reduce: operand a
  std::uint64_t bytes = 0;
  std::uint64_t count = 0;
  std::uint32_t firstDependent = 0;  // into Schedule::dependents() (after finalize)
  std::uint32_t dependentCount = 0;
  std::uint32_t depCount = 0;
};

using TaskId = std::uint32_t;
using Deps = std::vector<TaskId>;

class Schedule {
 public:
  Schedule() = default;
  explicit Schedule(std::string algorithm) : algorithm_(std::move(algorithm)) {}

  // Builders: each returns the new task's id. `deps` are ids of earlier tasks.
  TaskId send(int peer, std::uint32_t step, BufferRef src, std::uint64_t bytes, Deps deps = {});
  TaskId recv(int peer, std::uint32_t step, BufferRef dst, std::uint64_t bytes, Deps deps = {});
  TaskId reduce(BufferRef dst, BufferRef a, BufferRef b, std::uint64_t count, Deps deps = {});
  TaskId copy(BufferRef dst, BufferRef src, std::uint64_t bytes, Deps deps = {});
  TaskId divide(BufferRef dst, std::uint64_t count, Deps deps = {});
  // The call `params` describes, run on shared memory (at most one such task per schedule).
  TaskId shared(std::shared_ptr<const ScheduleParams> params, Deps deps = {});
  void setScratchBytes(std::uint64_t bytes) { scratchBytes_ = bytes; }

  // Renames every send's and receive's peer r to ranks[r] (before finalize): a schedule
  // built in a sub-context's ranks, run over its parent's mesh.
  void mapPeers(const std::vector<int>& ranks);

  // Computes the dependents of every task; called once by the engine before first use.
  void finalize();

  const std::string& algorithm() const noexcept { return algorithm_; }
  void setAlgorithm(std::string name) { algorithm_ = std::move(name); }
  const std::vector<Task>& tasks() const noexcept { return tasks_; }
  const std::vector<TaskId>& dependents() const noexcept { return dependents_; }
  std::uint64_t scratchBytes() const noexcept { return scratchBytes_; }
  // The params of its kShared task (nullptr: none).
  const ScheduleParams* sharedParams() const noexcept { return sharedParams_.get(); }
  bool finalized() const noexcept { return finalized_; }

  // Totals, for tests and the simulator: messages and bytes this rank sends.
  std::uint64_t sendCount() const;
  std::uint64_t sendBytes() const;

 private:
  TaskId add(Task task, Deps deps);

  std::string algorithm_;
  std::vector<Task> tasks_;
  std::vector<std::vector<TaskId>> depsOf_;  // until finalize()
  std::vector<TaskId> dependents_;
  std::uint64_t scratchBytes_ = 0;
  std::shared_ptr<const ScheduleParams> sharedParams_;
  bool finalized_ = false;
};

}  // namespace collx::algorithms
