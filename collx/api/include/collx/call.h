// A call as data: which collective (or send, recv), its buffers, counts, type, op, root or
// peer, and options, in one struct that execute() runs and start() starts. Every free
// function of collectives.h builds one of these and hands it over, so that a call made
// through a description and the same call made through its function are one path: the same
// checks (each collective's arguments are checked in one place, behind execute() and start()),
// the same errors, the same wire.
//
// For bindings and wrappers that forward calls (the Python module, the PyTorch backend): fill
// a Call from their own arguments and call execute() or start(), instead of one branch per
// collective and per blocking mode.
//
//   collx::Call call;
//   call.kind = collx::CallKind::kAllreduce;
//   call.sendbuf = in.data();
//   call.recvbuf = out.data();
//   call.count = n;
//   call.dtype = collx::DataType::kFloat32;
//   call.op = collx::ReduceOpKind::kMax;
//   collx::Work w = collx::start(*ctx, call);  // or collx::execute(*ctx, call): blocks
#pragma once

#include <cstdint>

#include "collx/base/data_type.h"
#include "collx/base/reduce_op.h"
#include "collx/collectives.h"
#include "collx/context.h"

namespace collx {

enum class CallKind : std::uint8_t {
  kAllreduce,
  kReduce,
  kBroadcast,
  kAllgather,
  kAllgatherv,
  kReduceScatter,
  kReduceScatterv,
  kGather,
  kGatherv,
  kScatter,
  kScatterv,
  kAlltoall,
  kAlltoallv,
  kBarrier,
  kSend,
  kRecv,
};

// "allreduce", "reduce_scatterv", "send", ...: the kind's name ("unknown" for a value outside
// the enum).
const char* callKindName(CallKind kind) noexcept;

// What each field means depends on `kind`, as in the function of collectives.h with that name
// (which documents each argument); fields a kind does not use are ignored.
//
//   kind             sendbuf  recvbuf  count             counts, displs      recvCounts, recvDispls
//   allreduce        sendbuf  recvbuf  count             -                   -
//   reduce           sendbuf  recvbuf  count             -                   -
//   broadcast        -        buffer   count             -                   -
//   allgather        sendbuf  recvbuf  count (per rank)  -                   -
//   allgatherv       sendbuf  recvbuf  sendcount         recvcounts, displs  -
//   reduce_scatter   sendbuf  recvbuf  recvcount         -                   -
//   reduce_scatterv  sendbuf  recvbuf  -                 recvcounts          -
//   gather           sendbuf  recvbuf  count (per rank)  -                   -
//   gatherv          sendbuf  recvbuf  sendcount         recvcounts, displs  -
//   scatter          sendbuf  recvbuf  count (per rank)  -                   -
//   scatterv         sendbuf  recvbuf  recvcount         sendcounts, displs  -
//   alltoall         sendbuf  recvbuf  count (per peer)  -                   -
//   alltoallv        sendbuf  recvbuf  -                 sendcounts, sdispls recvcounts, rdispls
//   barrier          -        -        -                 -                   -
//   send             buffer   -        count             -                   -
//   recv             -        buffer   count             -                   -
//
// `op` applies to allreduce, reduce and reduce_scatter(v); `root` to broadcast, reduce,
// gather(v) and scatter(v); `peer` and `tag` to send and recv. `options.algorithm` does not
// apply to send and recv.
//
// Lifetimes: the per-rank vectors are borrowed for the duration of execute() or start() only
// (the call keeps what it needs); the buffers, as for every call, until the call returns or
// its Work completes. A Call can be reused and changed between calls.
struct Call {
  CallKind kind = CallKind::kBarrier;
  const void* sendbuf = nullptr;
  void* recvbuf = nullptr;
  std::uint64_t count = 0;
  DataType dtype = DataType::kUint8;
  ReduceOp op = ReduceOpKind::kSum;
  int root = 0;
  int peer = -1;
  std::uint64_t tag = 0;
  // Per-rank element counts and displacements of the v-collectives (see the table). A
  // v-collective whose counts are missing fails with InvalidArgument; missing displacements
  // mean the blocks packed in rank order (the prefix sums of the counts).
  const Counts* counts = nullptr;
  const Counts* displs = nullptr;
  const Counts* recvCounts = nullptr;
  const Counts* recvDispls = nullptr;
  CollectiveOptions options;
};

// Runs `call` to completion on this thread and throws its error (InvalidArgument, before
// anything is sent, for arguments that do not fit its kind).
void execute(Context& ctx, const Call& call);

// Starts `call` and returns at once with its Work (argument errors are thrown here, as by
// execute(); the call's own errors by Work::wait()).
Work start(Context& ctx, const Call& call);

}  // namespace collx
