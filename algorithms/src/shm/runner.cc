#include "runner.h"

#include <atomic>
#include <cstring>
#include <optional>

#include "../builders.h"
#include "collx/base/check.h"
#include "collx/base/error.h"
#include "shared.h"

namespace collx::algorithms {

Schedule buildShared(const ScheduleParams& p) {
  Schedule s("shm");
  s.shared(std::make_shared<const ScheduleParams>(p));
  return s;
}

namespace shm {

// ---- frames -------------------------------------------------------------------------------

FrameStack& framesOf(Call& call) noexcept { return call.scratch.frames; }

// ---- waits --------------------------------------------------------------------------------

namespace {

inline void cpuRelax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// Member m's header of `use`: at the start of its buffer, the payload after kHeaderBytes
// (shared_group.h). Its `use` is stored last, with release, when the member publishes.
std::uint64_t publishedUse(const transport::SharedGroup& g, int m, std::uint64_t use) {
  auto* header = reinterpret_cast<transport::UseHeader*>(g.payload(m, use) -
                                                         transport::SharedGroup::kHeaderBytes);
  return std::atomic_ref<std::uint64_t>(header->use).load(std::memory_order_acquire);
}

}  // namespace

bool Call::published(int m, std::uint64_t use) {
  if (m == me) return true;
  std::uint64_t& seen = scratch.seen[static_cast<std::size_t>(m)];
  if (seen >= use) return true;
  // The member cannot run 4 uses ahead of this one (it would overwrite a buffer this member
  // has not read), so the buffer of `use` holds `use` or an older one.
  if (publishedUse(g, m, use) < use) return false;
  seen = use;
  return true;
}

bool Call::mayBegin() {
  const std::uint64_t use = g.nextUse();
  if (use <= static_cast<std::uint64_t>(transport::SharedGroup::kBuffers)) return true;
  const std::uint64_t need = use - transport::SharedGroup::kBuffers + 1;
  for (int m = 0; m < size; ++m) {
    if (m == me) continue;
    std::uint64_t& seen = scratch.seen[static_cast<std::size_t>(m)];
    if (seen >= need) continue;
    // That buffer holds `need`, the use before it or the one after (a member is at most 4
    // uses past this one's last): any of them at least `need` says the member got there.
    if (publishedUse(g, m, need) < need) return false;
    seen = need;
  }
  return true;
}

std::pair<int, std::uint64_t> Call::waitingFor() {
  switch (wait_.kind) {
    case Wait::Kind::kAwait:
      return {wait_.member, wait_.use};
    case Wait::Kind::kBegin: {
      const std::uint64_t need = wait_.use - transport::SharedGroup::kBuffers + 1;
      for (int m = 0; m < size; ++m) {
        if (m != me && scratch.seen[static_cast<std::size_t>(m)] < need &&
            publishedUse(g, m, need) < need) {
          return {m, need};
        }
      }
      break;
    }
    case Wait::Kind::kNone:
      break;
  }
  return {-1, 0};
}

// ---- the runner ---------------------------------------------------------------------------

namespace {

// A world of one: the result is this rank's own data.
void runAlone(const ScheduleParams& p, const Bindings& b) {
  const auto* in = static_cast<const std::uint8_t*>(b.input);
  auto* out = static_cast<std::uint8_t*>(b.output);
  std::uint64_t bytes = p.count * p.elementSize;
  if (p.coll == Collective::kReduceScatter)
    in += p.displs.empty() ? 0 : p.displs[0] * p.elementSize;
  if (p.coll == Collective::kBarrier || p.coll == Collective::kBroadcast) bytes = 0;
  if (bytes > 0 && in != out) std::memmove(out, in, bytes);
}

Step<> run(Call& c) {
  switch (c.p.coll) {
    case Collective::kBarrier:
      return barrier(c);
    case Collective::kAllreduce:
      return allreduce(c);
    case Collective::kBroadcast:
      return broadcast(c);
    case Collective::kAllgather:
      return allgather(c);
    case Collective::kReduceScatter:
      return reduceScatter(c);
    default:
      break;
  }
  throw Unsupported(Where{c.info.key.seq == 0 ? -1 : c.p.rank, callName(c.info), -1},
                    std::string("no shared-memory algorithm for ") + collectiveName(c.p.coll));
}

}  // namespace

struct Runner::State {
  transport::SharedGroup* group;
  Scratch scratch;
  std::optional<Call> call;
  std::optional<Step<>> top;
};

Runner::Runner(transport::SharedGroup* group)
    : state_(std::make_unique<State>()), waiting_(&state_->scratch.waiting) {
  state_->group = group;
  state_->scratch.waiting.deadline = Clock::time_point::max();  // (never waited)
}

Runner::~Runner() { abandon(); }

bool Runner::start(const ScheduleParams& params, const Bindings& bindings, const CallInfo& info,
                   bool blocking) {
  COLLX_CHECK(!busy());
  if (state_->group == nullptr) {
    runAlone(params, bindings);
    return true;
  }
  // Nothing to move: like the schedules, nothing to wait for either (but a barrier).
  if (params.coll != Collective::kBarrier && params.count == 0 &&
      (params.coll != Collective::kReduceScatter || params.displs.empty() ||
       params.displs.back() + params.counts.back() == 0)) {
    return true;
  }
  state_->call.emplace(*state_->group, params, bindings, info, state_->scratch);
  state_->call->blocking = blocking;
  try {
    state_->top.emplace(run(*state_->call));
  } catch (...) {
    state_->call.reset();
    throw;
  }
  return resume(true);
}

bool Runner::poll(int looks) {
  if (!busy()) return true;
  Call& call = *state_->call;
  for (int i = 0; i < looks; ++i) {
    if (call.ready()) return resume(false);
    cpuRelax();
  }
  return false;
}

bool Runner::resume(bool starting) {
  State& s = *state_;
  std::coroutine_handle<> next = starting ? s.top->handle() : s.call->takeWaiter();
  ++resumptions_;
  next.resume();  // until the call waits again or ends
  if (!s.top->handle().done()) return false;
  std::exception_ptr error = s.top->handle().promise().error;
  s.top.reset();
  s.call.reset();
  if (error) std::rethrow_exception(error);
  return true;
}

bool Runner::busy() const noexcept { return state_->top.has_value(); }

void Runner::abandon() noexcept {
  if (!busy()) return;
  state_->top.reset();  // destroys the suspended frames, innermost last
  state_->call.reset();
}

std::pair<int, std::uint64_t> Runner::awaited() {
  if (!busy()) return {-1, 0};
  return state_->call->waitingFor();
}

int Runner::waitingRank() {
  if (!busy()) return -1;
  const int m = state_->call->waitingFor().first;
  return m < 0 ? -1 : state_->group->rankOf(m);
}

std::string Runner::waitingFor() {
  if (!busy()) return "nothing";
  const auto [m, use] = state_->call->waitingFor();
  if (m < 0) return "its own shared-memory work";
  return "rank " + std::to_string(state_->group->rankOf(m)) + " (shared memory: its use " +
         std::to_string(use) + " of the group buffers)";
}

}  // namespace shm
}  // namespace collx::algorithms
