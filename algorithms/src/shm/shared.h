// What the shared-memory collectives (algorithms/src/shm/) have in common: one call's
// view of the group (its header, deadline and name), the rank-order reduction, and the way
// they wait.
//
// Each collective is a coroutine (a Step): where it needs another member's use of the group
// buffers, or its own buffer back, it co_awaits it. When that is there already it goes on at
// once; when not, the coroutine suspends and the engine's progress loop resumes it once it
// is (Runner::poll), so a call waiting for other ranks occupies no thread, and the engine
// bounds the wait by the call's deadline and ends it on abort or failure as for any
// schedule. Only the engine's driving thread runs them, one call at a time.
#pragma once

#include <chrono>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "collx/algorithms/call.h"
#include "collx/algorithms/observers.h"
#include "collx/algorithms/reduce.h"
#include "collx/algorithms/registry.h"
#include "collx/algorithms/tracer.h"
#include "collx/base/copy.h"
#include "collx/base/units.h"
#include "collx/transport/shared_group.h"

namespace collx::algorithms::shm {

// ---- coroutines ---------------------------------------------------------------------------

// The frames of a call's coroutines, from a stack the Runner owns (no allocation per call):
// a step's frame ends before its caller's, so they are freed in the order opposite to their
// allocation.
class FrameStack {
 public:
  // nullptr when full (the frame then comes from the heap). `previous`: what release() needs.
  void* allocate(std::size_t bytes, std::size_t& previous) noexcept {
    constexpr std::size_t kAlign = alignof(std::max_align_t);
    const std::size_t start = (top_ + kAlign - 1) / kAlign * kAlign;
    if (start + bytes > kBytes) return nullptr;
    previous = top_;
    top_ = start + bytes;
    return buffer_ + start;
  }
  // Frames end in the order opposite to their start (a step before its caller).
  void release(std::size_t previous) noexcept { top_ = previous; }

 private:
  static constexpr std::size_t kBytes = 16 * kKiB;
  alignas(std::max_align_t) unsigned char buffer_[kBytes];
  std::size_t top_ = 0;
};

class Call;
// Where a frame came from, written just before it: its stack (nullptr: the heap), and the
// stack's top before it.
struct FrameTag {
  FrameStack* stack;
  std::size_t previous;
  alignas(std::max_align_t) unsigned char frame[1];
};
inline constexpr std::size_t kFrameTagBytes = offsetof(FrameTag, frame);
FrameStack& framesOf(Call& call) noexcept;

struct PromiseBase {
  std::coroutine_handle<> continuation = std::noop_coroutine();
  std::exception_ptr error;

  std::suspend_always initial_suspend() noexcept { return {}; }
  struct Final {
    bool await_ready() noexcept { return false; }
    template <class P>
    std::coroutine_handle<> await_suspend(std::coroutine_handle<P> self) noexcept {
      return self.promise().continuation;  // the caller goes on (or resume() returns)
    }
    void await_resume() noexcept {}
  };
  Final final_suspend() noexcept { return {}; }
  void unhandled_exception() noexcept { error = std::current_exception(); }

  // Every step takes its Call first (member steps are the Call's): frames come from its
  // runner's stack.
  template <class... Args>
  static void* operator new(std::size_t bytes, Call& call, Args&...) {
    FrameStack& frames = framesOf(call);
    std::size_t previous = 0;
    void* at = frames.allocate(kFrameTagBytes + bytes, previous);
    FrameStack* stack = &frames;
    if (at == nullptr) {
      at = ::operator new(kFrameTagBytes + bytes);
      stack = nullptr;
    }
    auto* tag = static_cast<FrameTag*>(at);
    tag->stack = stack;
    tag->previous = previous;
    return tag->frame;
  }
  static void operator delete(void* frame) noexcept {
    auto* tag = reinterpret_cast<FrameTag*>(static_cast<unsigned char*>(frame) - kFrameTagBytes);
    if (tag->stack != nullptr) {
      tag->stack->release(tag->previous);
    } else {
      ::operator delete(tag);
    }
  }
};

template <class T>
struct Promise : PromiseBase {
  T value{};
  void return_value(T v) { value = std::move(v); }
};
template <>
struct Promise<void> : PromiseBase {
  void return_void() noexcept {}
};

// A step of a collective that may wait: started when awaited; co_await runs it to its end
// (suspending the awaiting coroutine meanwhile) and gives its result or throws its error.
template <class T = void>
class [[nodiscard]] Step {
 public:
  struct promise_type : Promise<T> {
    Step get_return_object() {
      return Step(std::coroutine_handle<promise_type>::from_promise(*this));
    }
  };
  using Handle = std::coroutine_handle<promise_type>;

  Step(Step&& other) noexcept : handle_(std::exchange(other.handle_, {})) {}
  Step& operator=(Step&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = std::exchange(other.handle_, {});
    }
    return *this;
  }
  ~Step() { reset(); }

  bool await_ready() const noexcept { return false; }
  std::coroutine_handle<> await_suspend(std::coroutine_handle<> caller) noexcept {
    handle_.promise().continuation = caller;
    return handle_;
  }
  T await_resume() {
    if (handle_.promise().error) std::rethrow_exception(handle_.promise().error);
    if constexpr (!std::is_void_v<T>) return std::move(handle_.promise().value);
  }

  // The Runner's side, for the outermost step.
  Handle handle() const noexcept { return handle_; }
  void reset() noexcept {
    if (handle_) handle_.destroy();
    handle_ = {};
  }

 private:
  explicit Step(Handle handle) : handle_(handle) {}
  Handle handle_;
};

// ---- one call -----------------------------------------------------------------------------

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

// What a suspended call waits for: member's use `use` (kAwait), or every other member's
// epoch to reach `use` so that this member may write its buffer again (kBegin).
struct Wait {
  enum class Kind : std::uint8_t { kNone, kBegin, kAwait };
  Kind kind = Kind::kNone;
  int member = -1;
  std::uint64_t use = 0;
};

// Scratch that outlives calls (the Runner's): no allocation per call once warm.
struct Scratch {
  FrameStack frames;
  transport::Waiting waiting;                // the call's, its namer naming `info`
  const CallInfo* info = nullptr;            // the call running
  std::vector<const std::uint8_t*> sources;  // of a reduction
  std::vector<Offer> offers;
  std::vector<std::uint8_t> bytes;
  std::vector<std::uint64_t> seen;  // a lower bound of each member's epoch
};

class Call {
 public:
  Call(transport::SharedGroup& group, const ScheduleParams& params, const Bindings& bindings,
       const CallInfo& info, Scratch& scratch)
      : g(group),
        p(params),
        info(info),
        in(static_cast<const std::uint8_t*>(bindings.input)),
        out(static_cast<std::uint8_t*>(bindings.output)),
        me(group.index()),
        size(group.size()),
        scratch(scratch),
        header_{0, info.key.seq, info.fingerprint},
        waiting_(scratch.waiting) {
    if (scratch.seen.size() != static_cast<std::size_t>(size)) {
      scratch.seen.assign(static_cast<std::size_t>(size), 0);
    }
    // (The Waiting outlives calls: its namer, a std::function, is made once.)
    scratch.info = &info;
    waiting_.deadline = info.deadline;
    waiting_.timeout = info.timeout;
    waiting_.seq = info.key.seq;
    waiting_.fingerprint = info.fingerprint;
    if (!waiting_.name) waiting_.name = [&scratch] { return callName(*scratch.info); };
    if (!waiting_.sleeping) {
      waiting_.sleeping = [&scratch](int rank, std::uint64_t use,
                                     std::chrono::steady_clock::time_point since) {
        const CallInfo& call = *scratch.info;
        if (call.notes.recorder == nullptr) return;
        Observers::admitPending(call);
        call.notes.recorder->waiting(call.notes.recordId, WaitKind::kShared, rank, 0, 0, use,
                                     Recorder::nanosOf(since));
      };
    }
    if (!waiting_.slept) {
      waiting_.slept = [&scratch](int rank, std::uint64_t use, Clock::time_point since) {
        const CallInfo& call = *scratch.info;
        if (call.notes.tracer == nullptr) return;
        call.notes.tracer->sharedWait(call.notes.traceId, rank, use, Recorder::nanosOf(since),
                                      Tracer::nowNs());
      };
    }
  }

  // co_await begin(): starts the next use, once every member may be overwritten; its
  // payload, to fill before publish().
  struct Begin {
    Call& c;
    bool await_ready() { return c.blocking || c.mayBegin(); }
    void await_suspend(std::coroutine_handle<> h) noexcept {
      c.suspend(h, Wait{Wait::Kind::kBegin, -1, c.g.nextUse()});
    }
    std::uint8_t* await_resume() { return c.g.beginUse(c.header_, c.waiting_); }
  };
  Begin begin() { return Begin{*this}; }
  void publish() { g.publish(); }
  // co_await await(m, use): member m's payload of `use` (this rank's own at once), checked
  // against this call.
  struct Await {
    Call& c;
    int m;
    std::uint64_t use;
    bool await_ready() { return c.blocking || c.published(m, use); }
    void await_suspend(std::coroutine_handle<> h) noexcept {
      c.suspend(h, Wait{Wait::Kind::kAwait, m, use});
    }
    const std::uint8_t* await_resume() { return c.g.await(m, use, c.header_, c.waiting_); }
  };
  Await await(int m, std::uint64_t use) { return Await{*this, m, use}; }
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
  // `direct(use)` (that first use) or `buffers()` runs (each a Step), and member 0 records
  // how long the whole call took (SharedGroup::recordDirect).
  template <class Direct, class Buffers>
  Step<> ledByMemberZero(transport::DirectCall kind, std::uint64_t bytes, Direct direct,
                         Buffers buffers) {
    const auto start = std::chrono::steady_clock::now();
    const std::uint64_t use = g.nextUse();
    const bool lead = me == 0;
    const bool chosen = lead && g.chooseDirect(kind, bytes);
    co_await offer(chosen ? Way::kDirect : Way::kBuffers, in, out);
    const bool reads = lead ? chosen : offerIn(co_await await(0, use)).direct();
    if (reads) {
      co_await direct(use);
    } else {
      co_await buffers();
    }
    if (lead) g.recordDirect(kind, bytes, reads, std::chrono::steady_clock::now() - start);
  }
  // Begins, fills with an Offer and publishes the next use.
  Step<> offer(Way way, const void* input, const void* output = nullptr) {
    std::uint8_t* mine = co_await begin();
    const std::uint64_t words[3] = {static_cast<std::uint64_t>(way),
                                    reinterpret_cast<std::uint64_t>(input),
                                    reinterpret_cast<std::uint64_t>(output)};
    std::memcpy(mine, words, sizeof(words));
    publish();
  }
  // The Offer in a member's payload.
  static Offer offerIn(const std::uint8_t* payload) {
    std::uint64_t words[3];
    std::memcpy(words, payload, sizeof(words));
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
  // The P sources of a reduction (scratch of the Runner's).
  std::vector<const std::uint8_t*>& sources() {
    scratch.sources.resize(static_cast<std::size_t>(size));
    return scratch.sources;
  }

  // The driver's side (Runner).
  // Whether what the suspended call waits for is there (no wait, no check).
  bool ready() {
    switch (wait_.kind) {
      case Wait::Kind::kAwait:
        return published(wait_.member, wait_.use);
      case Wait::Kind::kBegin:
        return mayBegin();
      case Wait::Kind::kNone:
        break;
    }
    return true;
  }
  // The coroutine to resume once ready(); nullptr when not suspended.
  std::coroutine_handle<> takeWaiter() noexcept {
    wait_.kind = Wait::Kind::kNone;
    return std::exchange(waiter_, {});
  }
  // The member this call waits for and its use (-1: none).
  std::pair<int, std::uint64_t> waitingFor();

  transport::SharedGroup& g;
  const ScheduleParams& p;
  const CallInfo& info;
  const std::uint8_t* in;
  std::uint8_t* out;
  const int me;
  const int size;
  Scratch& scratch;
  // Waits in the group's own waits (never suspends): a blocking call on its caller's thread.
  bool blocking = false;

 private:
  void suspend(std::coroutine_handle<> h, Wait wait) noexcept {
    waiter_ = h;
    wait_ = wait;
  }
  // Member m published `use` (its own: at once); remembers it.
  bool published(int m, std::uint64_t use);
  // beginUse() would not wait: every other member's epoch reached nextUse() - kBuffers + 1.
  bool mayBegin();

  transport::UseHeader header_;
  transport::Waiting& waiting_;
  Wait wait_;
  std::coroutine_handle<> waiter_;
};

Step<> barrier(Call& c);
Step<> allreduce(Call& c);
Step<> broadcast(Call& c);
Step<> allgather(Call& c);
Step<> reduceScatter(Call& c);

}  // namespace collx::algorithms::shm
