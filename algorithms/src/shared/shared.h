// What the shared-memory collectives (algorithms/src/shared/) have in common: one call's
// view of the group (its header, deadline and name) and the rank-order reduction.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstring>

#include "collx/algorithms/reduce.h"
#include "collx/algorithms/shared.h"
#include "collx/base/copy.h"

namespace collx::algorithms::shared {

// The payload of a first use that may lead to direct reads (broadcast, allgather,
// allreduce): how the call goes (the leading member's word counts: through the group
// buffers, by direct reads, or, a broadcast only, by direct reads of a first part and the
// group buffers for the rest) and where this member's data is (its input, its output).
enum class Way : std::uint64_t { kBuffers = 0, kDirect = 1, kSplit = 2 };
struct Offer {
  Way way;
  std::uint64_t input;
  std::uint64_t output;
  bool direct() const { return way != Way::kBuffers; }
};

// Copies into a call's output: with non-temporal stores when `stream` (copyStreaming: an
// output the caches cannot keep, which the call does not read), else copyBytes.
inline void copyOut(void* dst, const void* src, std::uint64_t len, bool stream) {
  if (stream) {
    copyStreaming(dst, src, len);
  } else {
    copyBytes(dst, src, len);
  }
}

class Call {
 public:
  Call(transport::SharedGroup& group, const ScheduleParams& params, const Bindings& bindings,
       const CallInfo& info)
      : g(group),
        p(params),
        info(info),
        in(static_cast<const std::uint8_t*>(bindings.input)),
        out(static_cast<std::uint8_t*>(bindings.output)),
        me(group.index()),
        size(group.size()),
        header_{0, info.key.seq, info.fingerprint},
        waiting_{info.deadline, info.timeout, [&info] { return callName(info); }, info.key.seq,
                 info.fingerprint} {}

  // Starts the next use: its payload, to fill before publish().
  std::uint8_t* begin() { return g.beginUse(header_, waiting_); }
  void publish() { g.publish(); }
  // Member m's payload of `use` (this rank's own without waiting).
  const std::uint8_t* await(int m, std::uint64_t use) { return g.await(m, use, header_, waiting_); }
  std::uint64_t bufferBytes() const { return g.bufferBytes(); }
  // Whether a call of `bytes` may read directly: its first use then carries the leading
  // member's Offer. From `min` bytes, where every member can read every other's memory
  // (directReads() is not never); when ranks outnumber cores (unless always), only up to 4
  // ranks and from `oversubscribedMin`. Every member decides alike: the size, the ranks,
  // directReads() and oversubscribed() are agreed.
  bool mayReadDirectly(std::uint64_t bytes, std::uint64_t min,
                       std::uint64_t oversubscribedMin) const {
    const transport::DirectReads how = g.directReads();
    if (bytes < min || how == transport::DirectReads::kNever) return false;
    return how == transport::DirectReads::kAlways || !g.oversubscribed() ||
           (size <= 4 && bytes >= oversubscribedMin);
  }
  // A call that member 0 leads and that may read directly (allgather, allreduce): its first
  // use offers this member's input and output and carries member 0's choice; then
  // `direct(use)` (that first use) or `buffers()` runs, and member 0 records how long the
  // whole call took (SharedGroup::recordDirect).
  template <class Direct, class Buffers>
  void ledByMemberZero(transport::DirectCall kind, std::uint64_t bytes, Direct&& direct,
                       Buffers&& buffers) {
    const auto start = std::chrono::steady_clock::now();
    const std::uint64_t use = g.nextUse();
    const bool lead = me == 0;
    const bool chosen = lead && g.chooseDirect(kind, bytes);
    offer(chosen ? Way::kDirect : Way::kBuffers, in, out);
    const bool reads = lead ? chosen : offerOf(0, use).direct();
    if (reads) {
      direct(use);
    } else {
      buffers();
    }
    if (lead) g.recordDirect(kind, bytes, reads, std::chrono::steady_clock::now() - start);
  }
  // Begins, fills with an Offer and publishes the next use.
  void offer(Way way, const void* input, const void* output = nullptr) {
    std::uint8_t* mine = begin();
    const std::uint64_t words[3] = {static_cast<std::uint64_t>(way),
                                    reinterpret_cast<std::uint64_t>(input),
                                    reinterpret_cast<std::uint64_t>(output)};
    std::memcpy(mine, words, sizeof(words));
    publish();
  }
  // Member m's Offer of `use`.
  Offer offerOf(int m, std::uint64_t use) {
    std::uint64_t words[3];
    std::memcpy(words, await(m, use), sizeof(words));
    return Offer{static_cast<Way>(words[0]), words[1], words[2]};
  }
  // Copies `bytes` at `address` in member m's memory to dst (SharedGroup::readFrom).
  void readFrom(int m, std::uint64_t address, void* dst, std::uint64_t bytes) {
    g.readFrom(m, address, dst, bytes, waiting_);
  }

  // dst = src[0] (op) src[1] (op) ... (op) src[size-1] over `count` elements from byte
  // `offset` of each source, in rank order; avg divides at the end.
  void reduceAll(std::uint8_t* dst, const std::uint8_t* const* src, std::uint64_t offset,
                 std::uint64_t count) const {
    if (count == 0) return;
    if (size == 1) {
      if (dst != src[0] + offset) std::memcpy(dst, src[0] + offset, count * p.elementSize);
    } else {
      reduce(dst, src[0] + offset, src[1] + offset, count, info.dtype, info.op);
      for (int m = 2; m < size; ++m) reduce(dst, dst, src[m] + offset, count, info.dtype, info.op);
    }
    if (info.op.kind() == ReduceOpKind::kAvg) {
      divideBy(dst, count, info.dtype, static_cast<std::uint64_t>(size));
    }
  }

  transport::SharedGroup& g;
  const ScheduleParams& p;
  const CallInfo& info;
  const std::uint8_t* in;
  std::uint8_t* out;
  const int me;
  const int size;

 private:
  transport::UseHeader header_;
  transport::Waiting waiting_;
};

void barrier(Call& c);
void allreduce(Call& c);
void broadcast(Call& c);
void allgather(Call& c);
void reduceScatter(Call& c);

}  // namespace collx::algorithms::shared
