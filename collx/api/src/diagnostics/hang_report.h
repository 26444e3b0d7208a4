// The hang report (internal): a job's view of a call that does not end, made by the library.
//
// Every context whose flight recorder is on has a HangReporter. One watcher thread per
// process serves them all: it never runs on a calling thread, so it answers while its rank
// is blocked in a call, busy in user code, or in another collective. A round of the report
// (opened when a call has waited COLLX_HANG_REPORT_AFTER, shortly before its deadline, on
// SIGUSR1 or by Context::dumpState()) goes through the job's store under
// "collx/<job>/<generation>/hang/":
//   hang/open/<name>    compareSet by every rank that opens it; the winner numbers it:
//   hang/rounds         a counter every watcher polls (add 0) once per period,
//   hang/round/<i>      the name of round i,
//   hang/<name>/<rank>  each rank's summary of its recorder (hang_diagnosis.h),
//   hang/<name>/writer  compareSet by the ranks that diagnosed the round: the winner logs the
//                       report at WARN and writes it to COLLX_HANG_REPORT_DIR.
// A rank with a call in flight reads every summary (waiting up to a grace for late ones: a
// rank that never answers is stopped, dead or stuck outside collx) and diagnoses the round;
// the diagnosis also goes into the error of a call it covered (EngineOptions::hangNote).
// Store traffic uses a connection of its own (Store::reopen) whose timeout is the grace: a
// store that does not answer costs the watcher a grace, never a call.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collx/context.h"
#include "hang_diagnosis.h"

namespace collx {
class Config;
class Error;
namespace algorithms {
class Recorder;
}
namespace rendezvous {
class Store;
}
}  // namespace collx

namespace collx::detail {

// Where the diagnosis of a round reaches the errors of the calls it covered; shared by the
// engine (which asks on failure only) and the reporter (which fills it).
class HangNotes {
 public:
  // The last diagnosis whose own rank's summary had call `id` in flight ("" if none): appended
  // to that call's error.
  std::string noteFor(std::uint64_t id) const;
  void set(std::vector<std::uint64_t> ids, std::string text);

 private:
  mutable std::mutex mutex_;
  std::vector<std::uint64_t> ids_;
  std::string text_;
};

class HangReporter {
 public:
  struct Setup {
    std::shared_ptr<algorithms::Recorder> recorder;
    std::shared_ptr<rendezvous::Store> store;  // the context's namespace
    std::shared_ptr<HangNotes> notes;
    std::vector<PeerInfo> peers;
    std::vector<std::string> connections;  // how this rank reaches each peer, by rank
    std::string job;
    std::int64_t generation = 0;
    int rank = 0;
    int size = 1;
    // Revokes (Context::revoke) reach the ranks that no connection reaches through the
    // store's "revoked" key, which the watcher looks at while `healthy()` and hands to
    // `revoked(rank, text)` when it finds it (either unset: not looked at).
    std::function<bool()> healthy;
    std::function<void(int rank, const std::string& text)> revoked;
    // Another reporter whose store connection this one talks through (in its own namespace)
    // instead of opening one: a shrunk context's takes its predecessor's (null: it opens
    // its own).
    const HangReporter* predecessor = nullptr;
  };

  // Registers a reporter with the process's watcher (started on first use); nullptr when the
  // recorder is off.
  static std::shared_ptr<HangReporter> start(Setup setup, const Config& config);
  ~HangReporter();
  HangReporter(const HangReporter&) = delete;
  HangReporter& operator=(const HangReporter&) = delete;

  // Leaves the watcher (does not wait for a round in progress).
  void stop();
  // Erases every key the reports of a job of `size` ranks wrote in `store` (its namespace),
  // once every rank has stopped its reporter.
  static void eraseKeys(rendezvous::Store& store, int size);
  // A round now, on the calling thread: every rank's summary within the grace, diagnosed.
  std::string dumpState();

  // The watcher's: one look at this rank's calls, the job's rounds and the diagnoses due.
  void tick();
  // tick()'s look at the store's revoke record (Setup::revoked).
  void checkRevoked();
  std::chrono::milliseconds period() const noexcept { return period_; }

  struct Round;

 private:
  explicit HangReporter(Setup setup, const Config& config);
  // Opens round `name` (numbering it if this rank is first) and answers it.
  void open(const std::string& name);
  // Publishes this rank's summary for `name` once; returns false if it had already.
  bool answer(const std::string& name);
  // Reads the summaries still missing; true when the round is complete or its grace passed.
  bool collect(Round& round);
  std::string finish(Round& round);
  Summary summary(const std::string& round) const;
  // The rounds this rank's calls make due now (their names).
  std::vector<std::string> checkCalls();
  std::unique_ptr<Round> newRound(const std::string& name) const;
  void storeFailed(const Error& e);
  std::string storeProblem() const;
  // A round of this rank's view alone (the store does not answer).
  void reportAlone(const std::string& name);

  Setup setup_;
  std::shared_ptr<rendezvous::Store> store_;  // the reporter's own connection
  std::chrono::milliseconds period_;
  std::chrono::milliseconds grace_;
  std::chrono::milliseconds after_{0};  // 0: automatic (see hang_report.cc)
  bool afterSet_ = false;
  std::string dir_;

  std::mutex mutex_;  // the state below (never held across store I/O)
  std::vector<std::string> answered_;
  int opened_ = 0;
  bool warnedLimit_ = false;
  int dumps_ = 0;

  // The watcher's only.
  std::int64_t roundsSeen_ = 0;
  std::vector<std::pair<std::uint64_t, int>> fired_;  // (call id, 1: after, 2: final)
  std::uint64_t signalsSeen_ = 0;
  std::vector<std::unique_ptr<Round>> pending_;
  bool storeFailed_ = false;
  std::string storeProblem_;
  std::chrono::steady_clock::time_point retryAt_{};
};

}  // namespace collx::detail
