// Runner: how the engine runs the collectives that work on shared memory directly (algorithm
// "shm", schedules of one TaskKind::kShared task). One call at a time, in the order the
// engine hands them over (every rank's calls use the group buffers in the same order);
// each is a coroutine (shared.h) that runs on the engine's driving thread until it has to
// wait for another member, and that poll() resumes once what it waits for is there. The
// engine keeps the call's deadline, abort and failure, as for any schedule.
//
// Not thread-safe: only the thread that drives the engine calls it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "collx/algorithms/call.h"
#include "collx/algorithms/registry.h"
#include "collx/transport/shared_group.h"

namespace collx::algorithms::shm {

class Runner {
 public:
  // `group`: every rank of the context (nullptr: a world of one rank).
  explicit Runner(transport::SharedGroup* group);
  ~Runner();
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  // Starts a call (its params, bindings and info outlive it) and runs it until it has to
  // wait or ends: true when it ended. Throws the call's error (it is then over).
  // `blocking`: the call waits in the group's own waits instead (SharedGroup::await: spin,
  // yield, sleep until a member publishes) and ends here.
  bool start(const ScheduleParams& params, const Bindings& bindings, const CallInfo& info,
             bool blocking);
  // Resumes the call when what it waits for is there, looking up to `looks` times (a pause
  // between looks): true when it ended (or none runs). Throws the call's error (it is then
  // over).
  bool poll(int looks = 1);
  // A call started and not ended.
  bool busy() const noexcept;
  // How many times calls were resumed so far (the engine's measure of activity).
  std::uint64_t resumptions() const noexcept { return resumptions_; }
  // Drops the call in progress (its error came from elsewhere: a deadline, an abort).
  void abandon() noexcept;
  // The rank the call waits for (-1: none), and "rank 3 (shared memory: its use 12 of the
  // group buffers)" for a timeout.
  int waitingRank();
  std::string waitingFor();
  // The group member (index) and its use that the call waits for; {-1, 0}: none.
  std::pair<int, std::uint64_t> awaited();
  // The waits of the last call (blocking): its deadline is still time_point::max() when it
  // never waited, else `timeout` after its first wait began; lastLook is their last reading
  // of the clock. (A world of one never waits.)
  const transport::Waiting& waiting() const noexcept { return *waiting_; }

 private:
  struct State;
  bool resume(bool starting);
  std::unique_ptr<State> state_;
  const transport::Waiting* waiting_;
  std::uint64_t resumptions_ = 0;
};

}  // namespace collx::algorithms::shm
