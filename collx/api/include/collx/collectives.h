// The collectives: free functions over a Context with an options struct each, blocking and
// nonblocking (`...Async`, returning a Work).
//
// Every rank of the context must make the same calls in the same order with matching
// arguments (count, dtype, op, root): a mismatch is detected on the wire and raised as a
// MismatchError on both sides. Counts are 64-bit element counts. Every call has a deadline
// (options.timeout, else the context's COLLX_TIMEOUT): past it the call fails with
// TimeoutError naming the peers it was waiting for, and the context fails for good.
//
// Buffers are borrowed: they must stay valid (and a nonblocking call's must stay untouched)
// until the call returns or its Work completes. A call that fails never writes its buffers
// after its error was raised.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "collx/base/data_type.h"
#include "collx/base/reduce_op.h"
#include "collx/context.h"

namespace collx {

namespace algorithms {
class Execution;
}

struct CollectiveOptions {
  // An algorithm by name; "" means COLLX_<COLL>_ALGO, else the default table (an unknown
  // name is an InvalidArgument listing the valid ones).
  std::string algorithm;
  // This call's deadline; unset means the context's timeout.
  std::optional<std::chrono::milliseconds> timeout;
  // The outcome is the same on every live rank (torchft's commit vote, per call): after the
  // collective the ranks agree (Context::agree) whether every part of it succeeded; then
  // every rank returns, or every rank throws: its own error, or, where its own part
  // completed, one saying that another rank's did not (its buffer must not be used then).
  // Blocking calls only (a nonblocking one is an InvalidArgument). Costs an agreement
  // through the store per call.
  bool uniform = false;
};

struct AllreduceOptions : CollectiveOptions {
  ReduceOp op = ReduceOpKind::kSum;
};
// reduce and reduce_scatter take the same options.
using ReduceOptions = AllreduceOptions;

// Per-rank element counts and displacements (in elements) of the v-collectives.
using Counts = std::vector<std::uint64_t>;

// A nonblocking call in flight. Copyable handle; the call goes on if every copy is dropped.
class Work {
 public:
  Work() = default;
  // Blocks until the call ends and throws its error; with a timeout, returns false when the
  // timeout passes first (the call goes on, bounded by its own deadline).
  bool wait(std::optional<std::chrono::milliseconds> timeout = std::nullopt);
  // Non-blocking: true when the call ended (successfully or not: see error()).
  bool test();
  bool isCompleted() { return test(); }
  // The call's error once it failed, else nullptr.
  std::exception_ptr error() const;
  bool valid() const noexcept { return execution_ != nullptr; }

 private:
  friend struct WorkAccess;
  std::shared_ptr<detail::Runtime> runtime_;
  std::shared_ptr<algorithms::Execution> execution_;
};

// out[i] = in_0[i] (op) in_1[i] ... over every rank, on every rank. In place when
// sendbuf == recvbuf. avg divides the sum by the number of ranks (integers truncate).
void allreduce(Context& ctx, const void* sendbuf, void* recvbuf, std::uint64_t count,
               DataType dtype, const AllreduceOptions& options = {});
Work allreduceAsync(Context& ctx, const void* sendbuf, void* recvbuf, std::uint64_t count,
                    DataType dtype, const AllreduceOptions& options = {});

// recvbuf (size * count elements) receives every rank's sendbuf (count elements) in rank
// order. In place when sendbuf is nullptr or recvbuf + rank * count.
void allgather(Context& ctx, const void* sendbuf, void* recvbuf, std::uint64_t count,
               DataType dtype, const CollectiveOptions& options = {});
Work allgatherAsync(Context& ctx, const void* sendbuf, void* recvbuf, std::uint64_t count,
                    DataType dtype, const CollectiveOptions& options = {});

// Like allgather with per-rank counts: recvbuf + displs[i] receives rank i's sendbuf
// (recvcounts[i] elements; sendcount must equal recvcounts[rank]). In place when sendbuf is
// nullptr or recvbuf + displs[rank].
void allgatherv(Context& ctx, const void* sendbuf, std::uint64_t sendcount, void* recvbuf,
                const Counts& recvcounts, const Counts& displs, DataType dtype,
                const CollectiveOptions& options = {});
Work allgathervAsync(Context& ctx, const void* sendbuf, std::uint64_t sendcount, void* recvbuf,
                     const Counts& recvcounts, const Counts& displs, DataType dtype,
                     const CollectiveOptions& options = {});

// Reduces sendbuf (size * recvcount elements) over every rank and leaves block `rank` of the
// result in recvbuf (recvcount elements).
void reduceScatter(Context& ctx, const void* sendbuf, void* recvbuf, std::uint64_t recvcount,
                   DataType dtype, const ReduceOptions& options = {});
Work reduceScatterAsync(Context& ctx, const void* sendbuf, void* recvbuf, std::uint64_t recvcount,
                        DataType dtype, const ReduceOptions& options = {});
// The same with per-rank counts: sendbuf holds sum(recvcounts) elements, rank i receives
// recvcounts[i] of them (the blocks in rank order).
void reduceScatterv(Context& ctx, const void* sendbuf, void* recvbuf, const Counts& recvcounts,
                    DataType dtype, const ReduceOptions& options = {});
Work reduceScattervAsync(Context& ctx, const void* sendbuf, void* recvbuf, const Counts& recvcounts,
                         DataType dtype, const ReduceOptions& options = {});

// The reduction of every rank's sendbuf lands in the root's recvbuf (recvbuf is ignored on
// the other ranks). In place at the root when sendbuf == recvbuf.
void reduce(Context& ctx, const void* sendbuf, void* recvbuf, std::uint64_t count, DataType dtype,
            int root, const ReduceOptions& options = {});
Work reduceAsync(Context& ctx, const void* sendbuf, void* recvbuf, std::uint64_t count,
                 DataType dtype, int root, const ReduceOptions& options = {});

// The root's recvbuf (size * count elements) receives every rank's sendbuf in rank order.
void gather(Context& ctx, const void* sendbuf, void* recvbuf, std::uint64_t count, DataType dtype,
            int root, const CollectiveOptions& options = {});
Work gatherAsync(Context& ctx, const void* sendbuf, void* recvbuf, std::uint64_t count,
                 DataType dtype, int root, const CollectiveOptions& options = {});
// With per-rank counts: the root's recvbuf + displs[i] receives recvcounts[i] elements from
// rank i (recvcounts and displs matter at the root only, except that the binomial algorithm
// needs recvcounts on every rank that forwards other ranks' blocks: pass them everywhere).
void gatherv(Context& ctx, const void* sendbuf, std::uint64_t sendcount, void* recvbuf,
             const Counts& recvcounts, const Counts& displs, DataType dtype, int root,
             const CollectiveOptions& options = {});
Work gathervAsync(Context& ctx, const void* sendbuf, std::uint64_t sendcount, void* recvbuf,
                  const Counts& recvcounts, const Counts& displs, DataType dtype, int root,
                  const CollectiveOptions& options = {});

// Block i of the root's sendbuf (count elements each) lands in rank i's recvbuf.
void scatter(Context& ctx, const void* sendbuf, void* recvbuf, std::uint64_t count, DataType dtype,
             int root, const CollectiveOptions& options = {});
Work scatterAsync(Context& ctx, const void* sendbuf, void* recvbuf, std::uint64_t count,
                  DataType dtype, int root, const CollectiveOptions& options = {});
// With per-rank counts: sendcounts[i] elements at the root's sendbuf + displs[i] go to rank i
// (sendcounts and displs matter at the root only, except that the binomial algorithm needs
// sendcounts on every rank that forwards other ranks' blocks: pass them everywhere).
void scatterv(Context& ctx, const void* sendbuf, const Counts& sendcounts, const Counts& displs,
              void* recvbuf, std::uint64_t recvcount, DataType dtype, int root,
              const CollectiveOptions& options = {});
Work scattervAsync(Context& ctx, const void* sendbuf, const Counts& sendcounts,
                   const Counts& displs, void* recvbuf, std::uint64_t recvcount, DataType dtype,
                   int root, const CollectiveOptions& options = {});

// Block j of rank i's sendbuf (count elements) lands as block i of rank j's recvbuf.
void alltoall(Context& ctx, const void* sendbuf, void* recvbuf, std::uint64_t count, DataType dtype,
              const CollectiveOptions& options = {});
Work alltoallAsync(Context& ctx, const void* sendbuf, void* recvbuf, std::uint64_t count,
                   DataType dtype, const CollectiveOptions& options = {});
// With per-peer counts: sendcounts[j] elements at sendbuf + sdispls[j] go to rank j, which
// receives them at its recvbuf + rdispls[i] (its recvcounts[i] must equal them).
void alltoallv(Context& ctx, const void* sendbuf, const Counts& sendcounts, const Counts& sdispls,
               void* recvbuf, const Counts& recvcounts, const Counts& rdispls, DataType dtype,
               const CollectiveOptions& options = {});
Work alltoallvAsync(Context& ctx, const void* sendbuf, const Counts& sendcounts,
                    const Counts& sdispls, void* recvbuf, const Counts& recvcounts,
                    const Counts& rdispls, DataType dtype, const CollectiveOptions& options = {});

// The root's buffer is copied into every other rank's buffer.
void broadcast(Context& ctx, void* buffer, std::uint64_t count, DataType dtype, int root,
               const CollectiveOptions& options = {});
Work broadcastAsync(Context& ctx, void* buffer, std::uint64_t count, DataType dtype, int root,
                    const CollectiveOptions& options = {});

// Returns on every rank once every rank has entered it.
void barrier(Context& ctx, const CollectiveOptions& options = {});
Work barrierAsync(Context& ctx, const CollectiveOptions& options = {});

// Point to point. A receive matches the oldest send from `peer` with the same tag; count and
// dtype must agree. A send completes once its bytes are handed to the transport. Tags lie
// below 2^40 (the bits above name a sub-context's messages: Context::split).
void send(Context& ctx, const void* buffer, std::uint64_t count, DataType dtype, int peer,
          std::uint64_t tag = 0, const CollectiveOptions& options = {});
void recv(Context& ctx, void* buffer, std::uint64_t count, DataType dtype, int peer,
          std::uint64_t tag = 0, const CollectiveOptions& options = {});
Work sendAsync(Context& ctx, const void* buffer, std::uint64_t count, DataType dtype, int peer,
               std::uint64_t tag = 0, const CollectiveOptions& options = {});
Work recvAsync(Context& ctx, void* buffer, std::uint64_t count, DataType dtype, int peer,
               std::uint64_t tag = 0, const CollectiveOptions& options = {});

}  // namespace collx
