// Simulator: every rank's schedule of one call, run in one process over a virtual transport.
//
// The schedules are the real ones (the registry's builders); a deterministic event loop
// matches sends to receives by (peer, step) in posting order, as the transports do, copies
// the bytes and runs reductions, copies and divisions with the real kernels (reduce.h). It
// checks what a real run would only show as a hang or a MismatchError, naming rank, peer
// and step: a peer outside the world, a buffer range outside its buffer, messages nobody
// receives or receives that nobody sends, messages whose two sides disagree on the length,
// and deadlocks. A send completes only once its receive is posted (the rendezvous the TCP
// transport uses above its eager limit), so a schedule that only works when the transport
// buffers messages is reported as a deadlock.
//
// It also counts, per rank, what the registry's Cost formulas predict (messages, bytes,
// reduced elements) and the communication rounds on the critical path, and models the time
// of the call (TimeModel). For large P it can skip the bytes (SimOptions::moveBytes) and
// only count and time: memory and time then grow with the tasks, not the bytes, so a ring
// allreduce over P = 1024 at 64 MiB (5 million tasks) takes seconds, the logarithmic
// algorithms milliseconds (benchmarks/README.md has the figures).
//
// Everything here is single-threaded and reentrant: concurrent calls share nothing.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "collx/algorithms/registry.h"
#include "collx/algorithms/schedule.h"
#include "collx/base/data_type.h"
#include "collx/base/reduce_op.h"

namespace collx::algorithms {

// The alpha-beta-gamma model of one call, with one clock per rank:
// - A message occupies its sender's outgoing link for alpha + bytes * beta: the sender's
//   messages leave one after the other, in the order they were posted.
// - It arrives alpha + bytes * beta after it left. With serializeIncoming (the default),
//   the receiver's incoming link also takes one message at a time (full-duplex single-port
//   model: a root that gathers from P-1 ranks pays P-1 times), else only senders queue.
// - A receive completes when its message arrived and it was posted; a send when its bytes
//   left and its receive was posted.
// - Reductions and divisions run on their rank's CPU one after the other and cost
//   gamma * bytes; copies cost nothing (the model is about the network and the arithmetic).
// The call's time is the last rank's finish. The defaults are close to loopback TCP on the
// machine the selection table was measured on.
struct TimeModel {
  double alpha = 10e-6;       // seconds per message
  double beta = 1.0 / 2.5e9;  // seconds per byte on a link
  double gamma = 1.0 / 10e9;  // seconds per reduced byte
  bool serializeIncoming = true;
};

struct SimOptions {
  // false: count and time only; no buffer is allocated and SimRankResult::output is empty.
  bool moveBytes = true;
  // How reductions and divisions read the bytes; the element size must be
  // dataTypeSize(dtype) when bytes move.
  DataType dtype = DataType::kUint8;
  // The op the kernels apply (a custom one too); its kind must be ScheduleParams::op.
  ReduceOp op;
  TimeModel model;
};

// One rank's buffers, as the caller of the collective would pass them.
struct SimBuffers {
  std::vector<std::uint8_t> input;
  std::vector<std::uint8_t> output;  // its initial contents stay where the call writes nothing
  // In place: the input is the output from this byte offset on (`input` is then unused),
  // e.g. 0 for an allreduce in place, rank * block bytes for an allgather in place.
  std::optional<std::uint64_t> inputInOutput;
};

struct SimRankResult {
  Cost cost;                         // counted from this rank's schedule
  std::uint64_t rounds = 0;          // messages on the longest dependency path ending here
  double finish = 0;                 // seconds: when its last task ended
  bool finished = false;             // every task ran
  std::vector<std::uint8_t> output;  // moveBytes only
};

enum class SimProblemKind : std::uint8_t {
  kBadPeer,         // a send or receive names a rank outside [0, P)
  kOutOfBounds,     // a task's range leaves its buffer (moveBytes only)
  kUnmatched,       // a message nobody receives, or a receive nobody sends
  kLengthMismatch,  // sender and receiver disagree on the number of bytes
  kDeadlock,        // ranks wait for each other
};

const char* simProblemKindName(SimProblemKind kind) noexcept;

struct SimProblem {
  SimProblemKind kind;
  int rank = -1;  // whose task it is: the receiver for a length mismatch, the first rank of
                  // a deadlock cycle
  int peer = -1;
  std::uint32_t step = 0;
  std::string detail;  // a sentence naming ranks, peers, steps and bytes
};

struct SimResult {
  std::vector<SimRankResult> ranks;
  std::vector<SimProblem> problems;  // empty when the call ran to completion cleanly
  double seconds = 0;                // modeled time: the last rank's finish
  std::uint64_t rounds = 0;          // the most rounds of any rank (the critical path)
  std::uint64_t messages = 0;        // over all ranks
  std::uint64_t bytes = 0;           // over all ranks

  bool ok() const noexcept { return problems.empty(); }
  // Every problem, one per line ("" when ok()).
  std::string describeProblems() const;
};

// Rank r's params (its rank and size filled in) and buffers.
using ParamsOf = std::function<ScheduleParams(int rank)>;
using BuffersOf = std::function<SimBuffers(int rank)>;

// Builds every rank's schedule with algorithm.build(paramsOf(r)) and runs them. `buffersOf`
// may be empty when options.moveBytes is false. Throws InvalidArgument for bad arguments
// (size outside [1, 65536], params whose rank or size disagree, an element size that does
// not fit dtype); problems of the schedules themselves are returned in SimResult::problems.
SimResult simulate(const AlgorithmInfo& algorithm, int size, const ParamsOf& paramsOf,
                   const BuffersOf& buffersOf, const SimOptions& options);

// The same params on every rank but for `rank` (params.size is the world).
SimResult simulate(const AlgorithmInfo& algorithm, const ScheduleParams& params,
                   const BuffersOf& buffersOf, const SimOptions& options);

// Runs schedules built by hand, schedules[r] being rank r's; `buffers` has one entry per
// rank, or none when options.moveBytes is false. The element size of reductions is
// dataTypeSize(options.dtype).
SimResult simulateSchedules(std::vector<Schedule> schedules, std::vector<SimBuffers> buffers,
                            const SimOptions& options);

}  // namespace collx::algorithms
