#include "hang_report.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <thread>

#include "../recovery.h"
#include "collx/algorithms/recorder.h"
#include "collx/base/config.h"
#include "collx/base/log.h"
#include "collx/base/setting.h"
#include "collx/rendezvous/prefix_store.h"
#include "collx/rendezvous/store.h"
#include "hang_diagnosis.h"
#include "process_probe.h"

namespace collx::detail {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

const AutoSetting<kind::Duration> kHangReportAfter(
    {.name = "COLLX_HANG_REPORT_AFTER",
     .component = "report",
     .automatic = "a quarter of the call's timeout, at least 10s",
     .range = {std::chrono::milliseconds(0)},
     .help = "How long a call waits before the ranks make a hang report (each rank's view of "
             "its calls, joined through the store into one diagnosis naming the rank that holds "
             "the others). Another report follows shortly before the call's deadline and goes "
             "into its TimeoutError. 0: no automatic reports (SIGUSR1 and "
             "Context::dumpState() still make one)."});

const AutoSetting<kind::String> kHangReportDir(
    {.name = "COLLX_HANG_REPORT_DIR",
     .component = "report",
     .automatic = "none: the report is only logged",
     .help = "A directory where the rank that logs a hang report also writes it as JSON, one "
             "file per report (collx-hang-<job>-g<generation>-<round>.json)."});

// Reports a context makes at most (bounded store keys).
constexpr int kMaxRounds = 64;

// ---- SIGUSR1 ---------------------------------------------------------------------------------

std::atomic<std::uint64_t> gSignals{0};
std::atomic<int> gWakeFd{-1};
struct sigaction gPrevious {};

void onSignal(int sig, siginfo_t* info, void* context) {
  const int saved = errno;
  gSignals.fetch_add(1, std::memory_order_relaxed);
  const int fd = gWakeFd.load(std::memory_order_relaxed);
  if (fd >= 0) {
    const std::uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(fd, &one, sizeof one);
  }
  // A handler that was there first (Python's faulthandler.register, a profiler) still runs.
  if (gPrevious.sa_flags & SA_SIGINFO) {
    if (gPrevious.sa_sigaction != nullptr) gPrevious.sa_sigaction(sig, info, context);
  } else if (gPrevious.sa_handler != SIG_DFL && gPrevious.sa_handler != SIG_IGN &&
             gPrevious.sa_handler != nullptr) {
    gPrevious.sa_handler(sig);
  }
  errno = saved;
}

// Ours over the default (which ends the process) or chained to a handler; a process that
// ignores SIGUSR1 keeps ignoring it.
void installSignalHandler() {
  struct sigaction current {};
  if (sigaction(SIGUSR1, nullptr, &current) != 0 || current.sa_handler == SIG_IGN) return;
  gPrevious = current;
  struct sigaction mine {};
  mine.sa_sigaction = onSignal;
  mine.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&mine.sa_mask);
  sigaction(SIGUSR1, &mine, nullptr);
}

// ---- the watcher -----------------------------------------------------------------------------

class Watcher {
 public:
  static Watcher& instance() {
    static Watcher* watcher = new Watcher();  // never destroyed: contexts may outlive main()
    return *watcher;
  }

  void add(const std::shared_ptr<HangReporter>& reporter) {
    std::lock_guard<std::mutex> lock(mutex_);
    reporters_.push_back(reporter);
    if (!running_) {
      if (wakeFd_ < 0) {
        wakeFd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        gWakeFd.store(wakeFd_);
        installSignalHandler();
        pthread_atfork(nullptr, nullptr, [] { Watcher::instance().afterFork(); });
        // A context left open at exit: the thread ends before the statics it uses (the
        // logger) are destroyed.
        std::atexit([] { Watcher::instance().stop(nullptr); });
      }
      // A thread that ended on its own (its contexts gone) is past its last use of the lock.
      if (thread_.joinable()) thread_.join();
      running_ = true;
      stopping_ = false;
      thread_ = std::thread([this] { loop(); });
    }
    wake();
  }

  // Leaves the watcher; the last to leave ends its thread and waits for it (at most the
  // round in progress: a store request, bounded by the grace), so that nothing of collx runs
  // once every context is gone.
  void remove(const HangReporter* reporter) { stop(reporter); }

 private:
  void stop(const HangReporter* reporter) {
    std::thread ending;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      std::erase_if(reporters_, [&](const std::weak_ptr<HangReporter>& w) {
        auto r = w.lock();
        return !r || r.get() == reporter || reporter == nullptr;
      });
      if (!reporters_.empty()) return;
      stopping_ = true;
      ending = std::move(thread_);
    }
    wake();
    if (!ending.joinable()) return;
    if (ending.get_id() == std::this_thread::get_id()) {
      ending.detach();
    } else {
      ending.join();
    }
  }

  void wake() {
    if (wakeFd_ < 0) return;
    const std::uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(wakeFd_, &one, sizeof one);
  }

  // The child of a fork has no watcher thread, and its contexts are the parent's (the mutex
  // may have been held by a thread the child does not have).
  void afterFork() {
    new (&mutex_) std::mutex();
    new (&thread_) std::thread();  // the parent's, not to be joined here
    reporters_.clear();
    running_ = false;
  }

  void loop() {
    log::ScopedLogRank noRank(-1);
    for (;;) {
      std::vector<std::shared_ptr<HangReporter>> now;
      milliseconds period(2000);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        for (const auto& w : reporters_) {
          if (auto r = w.lock()) {
            now.push_back(std::move(r));
            period = std::min(period, now.back()->period());
          }
        }
        if (now.empty() || stopping_) {
          // Nothing to watch: the thread ends (a later context starts another).
          running_ = false;
          return;
        }
      }
      for (const auto& r : now) r->tick();
      now.clear();
      pollfd p{wakeFd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(period.count())) > 0) {
        std::uint64_t drained;
        // NOLINTNEXTLINE(clang-analyzer-unix.BlockInCriticalSection): the lock ended above
        [[maybe_unused]] ssize_t n = ::read(wakeFd_, &drained, sizeof drained);
      }
    }
  }

  std::mutex mutex_;
  std::vector<std::weak_ptr<HangReporter>> reporters_;
  std::thread thread_;
  bool running_ = false;
  bool stopping_ = false;
  int wakeFd_ = -1;
};

std::int64_t steadyNs() { return algorithms::Recorder::nanosOf(Clock::now()); }

std::string keyOf(const std::string& round, const std::string& what) {
  return "hang/" + round + "/" + what;
}

}  // namespace

// ---- HangNotes -------------------------------------------------------------------------------

std::string HangNotes::noteFor(std::uint64_t id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (std::find(ids_.begin(), ids_.end(), id) == ids_.end()) return {};
  return text_;
}

void HangNotes::set(std::vector<std::uint64_t> ids, std::string text) {
  std::lock_guard<std::mutex> lock(mutex_);
  ids_ = std::move(ids);
  text_ = std::move(text);
}

// ---- a round ---------------------------------------------------------------------------------

struct HangReporter::Round {
  std::string name;
  std::string trigger;  // "after", "timeout", "signal", "dump"
  Clock::time_point opened;
  std::vector<std::optional<std::string>> summaries;  // by rank
  std::vector<std::uint64_t> inFlight;                // this rank's calls it covers
  std::string storeProblem;                           // the store failed: only this rank's view
};

// ---- HangReporter ----------------------------------------------------------------------------

std::shared_ptr<HangReporter> HangReporter::start(Setup setup, const Config& config) {
  if (!setup.recorder) return nullptr;
  std::shared_ptr<HangReporter> reporter(new HangReporter(std::move(setup), config));
  Watcher::instance().add(reporter);
  return reporter;
}

HangReporter::HangReporter(Setup setup, const Config& config) : setup_(std::move(setup)) {
  // A period that grows with the job (each watcher polls the store once per period), a grace
  // of a few periods for the others to answer.
  period_ = std::clamp(milliseconds(4 * setup_.size), milliseconds(250), milliseconds(2000));
  grace_ = std::max(milliseconds(1000), 4 * period_);
  if (auto after = kHangReportAfter.get(config)) {
    after_ = std::chrono::duration_cast<milliseconds>(*after);
    afterSet_ = true;
  }
  dir_ = kHangReportDir.get(config).value_or("");
  rendezvous::StoreOptions options;
  options.timeout = grace_;
  options.rank = setup_.rank;
  // (A predecessor's connection serves when both are namespaces of one store.)
  const auto* mine = dynamic_cast<const rendezvous::PrefixStore*>(setup_.store.get());
  const auto* theirs =
      setup_.predecessor
          ? dynamic_cast<const rendezvous::PrefixStore*>(setup_.predecessor->store_.get())
          : nullptr;
  if (mine != nullptr && theirs != nullptr) {
    store_ = std::make_shared<rendezvous::PrefixStore>(mine->prefix(), theirs->inner(), options);
    setup_.predecessor = nullptr;
    return;
  }
  setup_.predecessor = nullptr;
  try {
    store_ = std::shared_ptr<rendezvous::Store>(setup_.store->reopen(options));
  } catch (const Error& e) {
    COLLX_DEBUG(kCore, "rank {}: the hang report shares the context's store ({})", setup_.rank,
                e.what());
  }
  if (!store_) store_ = setup_.store;
}

HangReporter::~HangReporter() = default;

void HangReporter::stop() { Watcher::instance().remove(this); }

bool HangReporter::answer(const std::string& name) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (std::find(answered_.begin(), answered_.end(), name) != answered_.end()) return false;
    answered_.push_back(name);
  }
  store_->set(keyOf(name, std::to_string(setup_.rank)), summaryJson(summary(name)));
  return true;
}

Summary HangReporter::summary(const std::string& round) const {
  const std::vector<algorithms::CallRecord> records = setup_.recorder->snapshot();
  SummaryInput input;
  input.rank = setup_.rank;
  input.round = round;
  // The records tell the next sequence number (a rank that skipped a call has not taken it).
  input.nextSeq = 0;
  for (auto it = records.rbegin(); it != records.rend(); ++it) {
    if (it->state == algorithms::CallState::kFailed) {
      input.failure = setup_.recorder->failureOf(it->id);
      break;
    }
  }
  input.describePeer = [this](int peer) {
    return peer >= 0 && peer < static_cast<int>(setup_.connections.size())
               ? setup_.connections[static_cast<std::size_t>(peer)]
               : std::string();
  };
  return summarize(records, steadyNs(), input);
}

void HangReporter::open(const std::string& name) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (opened_ >= kMaxRounds) {
      if (!warnedLimit_) {
        warnedLimit_ = true;
        COLLX_WARN(kCore, "rank {}: {} hang reports made; no more from this context", setup_.rank,
                   kMaxRounds);
      }
      return;
    }
    ++opened_;
  }
  const std::string me = std::to_string(setup_.rank);
  const rendezvous::Bytes holder =
      store_->compareSet("hang/open/" + name, {}, rendezvous::toBytes(me));
  if (rendezvous::toString(holder) == me) {
    const std::int64_t i = store_->add("hang/rounds", 1);
    store_->set("hang/round/" + std::to_string(i), name);
  }
}

bool HangReporter::collect(Round& round) {
  bool complete = true;
  for (int r = 0; r < setup_.size; ++r) {
    auto& s = round.summaries[static_cast<std::size_t>(r)];
    if (s) continue;
    const std::string key = keyOf(round.name, std::to_string(r));
    if (store_->check({key})) {
      s = rendezvous::toString(store_->get(key));
    } else {
      complete = false;
    }
  }
  return complete || Clock::now() - round.opened >= grace_;
}

std::string HangReporter::finish(Round& round) {
  std::vector<std::optional<Summary>> summaries(static_cast<std::size_t>(setup_.size));
  for (int r = 0; r < setup_.size; ++r) {
    const auto& text = round.summaries[static_cast<std::size_t>(r)];
    if (!text) continue;
    try {
      summaries[static_cast<std::size_t>(r)] = parseSummary(*text, r, setup_.rank);
    } catch (const Error& e) {
      COLLX_WARN(kCore, "rank {}: rank {}'s summary for the hang report {} is unreadable: {}",
                 setup_.rank, r, round.name, e.what());
    }
  }
  ReportInfo info;
  info.job = setup_.job;
  info.generation = setup_.generation;
  info.round = round.name;
  info.trigger = round.trigger;
  info.time = std::chrono::system_clock::now();
  info.storeProblem = round.storeProblem;
  const Diagnosis diagnosis = diagnose(summaries, setup_.peers, hostProbe(), info);
  log::ScopedLogRank logRank(setup_.rank);
  if (!round.inFlight.empty()) setup_.notes->set(round.inFlight, diagnosis.text);
  const std::string me = std::to_string(setup_.rank);
  bool writer = false;
  try {
    writer = rendezvous::toString(store_->compareSet(keyOf(round.name, "writer"), {},
                                                     rendezvous::toBytes(me))) == me;
  } catch (const Error&) {
    writer = true;  // the store is gone: every rank says it
  }
  if (writer) {
    COLLX_WARN(kCore, "{}", diagnosis.text);
    if (!dir_.empty()) {
      try {
        writeReport(dir_, diagnosis);
      } catch (const Error& e) {
        COLLX_WARN(kCore, "rank {}: cannot write the hang report to {}: {}", setup_.rank, dir_,
                   e.what());
      }
    }
  } else {
    COLLX_DEBUG(kCore, "{}", diagnosis.text);
  }
  return diagnosis.text;
}

std::vector<std::string> HangReporter::checkCalls() {
  std::vector<std::string> due;
  std::vector<std::uint64_t> inFlight;
  const std::int64_t now = steadyNs();
  for (const algorithms::CallRecord& c : setup_.recorder->snapshot()) {
    // (Admitted without a time: a short call that has not waited yet.)
    if (c.state == algorithms::CallState::kCompleted || c.state == algorithms::CallState::kFailed ||
        c.admittedNs == 0) {
      continue;
    }
    const std::uint64_t id = c.id;
    inFlight.push_back(id);
    const milliseconds timeout(c.timeoutMs);
    // Rounds are worth it only when the grace fits the call's timeout a few times over.
    if (timeout < 4 * grace_) continue;
    const milliseconds age =
        std::chrono::duration_cast<milliseconds>(std::chrono::nanoseconds(now - c.admittedNs));
    const milliseconds after = afterSet_ ? after_ : std::max(milliseconds(10000), timeout / 4);
    auto fired = [&](int which) {
      return std::find(fired_.begin(), fired_.end(), std::make_pair(id, which)) != fired_.end();
    };
    // A collective's round has the same name on every rank; a send's or receive's is this
    // rank's own.
    const std::string base = c.space == transport::Space::kCollective
                                 ? "c" + std::to_string(c.seq)
                                 : "p" + std::to_string(c.seq) + "." + std::to_string(c.peer) +
                                       ".r" + std::to_string(setup_.rank);
    if (after.count() > 0 && after <= timeout - 3 * grace_ && age >= after && !fired(1)) {
      fired_.emplace_back(id, 1);
      due.push_back(base + ".a");
    }
    // The last round ends before the deadline (a grace to collect, a grace to spare on a
    // loaded host), so that the call's error carries it.
    if (age >= timeout - 2 * grace_ && !fired(2)) {
      fired_.emplace_back(id, 2);
      due.push_back(base + ".z");
    }
  }
  std::erase_if(fired_, [&](const auto& f) {
    return std::find(inFlight.begin(), inFlight.end(), f.first) == inFlight.end();
  });
  return due;
}

std::unique_ptr<HangReporter::Round> HangReporter::newRound(const std::string& name) const {
  auto round = std::make_unique<Round>();
  round->name = name;
  round->trigger = name[0] == 'u'         ? "signal"
                   : name[0] == 'd'       ? "dump"
                   : name.ends_with(".z") ? "timeout"
                                          : "after";
  round->opened = Clock::now();
  round->summaries.resize(static_cast<std::size_t>(setup_.size));
  for (const algorithms::CallRecord& c : setup_.recorder->snapshot()) {
    if (c.state != algorithms::CallState::kCompleted && c.state != algorithms::CallState::kFailed) {
      round->inFlight.push_back(c.id);
    }
  }
  return round;
}

void HangReporter::eraseKeys(rendezvous::Store& store, int size) {
  if (!store.check({"hang/rounds"})) return;
  const std::int64_t rounds =
      std::min<std::int64_t>(store.add("hang/rounds", 0), std::int64_t{kMaxRounds} * size);
  for (std::int64_t i = 1; i <= rounds; ++i) {
    const std::string numbered = "hang/round/" + std::to_string(i);
    if (!store.check({numbered})) continue;
    const std::string name = rendezvous::toString(store.get(numbered));
    for (int r = 0; r < size; ++r) store.erase(keyOf(name, std::to_string(r)));
    store.erase(keyOf(name, "writer"));
    store.erase("hang/open/" + name);
    store.erase(numbered);
  }
  store.erase("hang/rounds");
}

void HangReporter::storeFailed(const Error& e) {
  if (!storeFailed_) {
    COLLX_DEBUG(kCore, "rank {}: the hang report's store ({}) failed: {}", setup_.rank,
                setup_.store->describe(), e.what());
  }
  storeFailed_ = true;
  storeProblem_ = storeProblem();
  // Each request costs a grace while it does not answer: the watcher looks again later,
  // and meanwhile keeps its eye on the calls.
  retryAt_ = Clock::now() + 4 * period_;
}

std::string HangReporter::storeProblem() const {
  return "the store (" + setup_.store->describe() + ") did not answer within " +
         std::to_string(grace_.count()) + " ms";
}

void HangReporter::reportAlone(const std::string& name) {
  std::unique_ptr<Round> round = newRound(name);
  round->summaries[static_cast<std::size_t>(setup_.rank)] = summaryJson(summary(name));
  round->storeProblem = storeProblem_;
  finish(*round);
}

void HangReporter::checkRevoked() {
  if (!setup_.healthy || !setup_.revoked || !setup_.healthy()) return;
  if (!store_->check({kRevokedKey})) return;
  int rank = -1;
  std::string text;
  parseRevoked(rendezvous::toString(store_->get(kRevokedKey)), rank, text);
  setup_.revoked(rank, text);
}

void HangReporter::tick() {
  std::vector<std::string> due = checkCalls();
  const std::uint64_t signals = gSignals.load(std::memory_order_relaxed);
  if (signals != signalsSeen_) {
    signalsSeen_ = signals;
    due.push_back("u" + std::to_string(signals));
  }
  auto resting = [&] { return storeFailed_ && Clock::now() < retryAt_; };
  for (const std::string& name : due) {
    if (!resting()) {
      try {
        open(name);
        continue;
      } catch (const Error& e) {
        storeFailed(e);
      }
    }
    // The report before a deadline is made all the same, from what this rank knows.
    if (name.ends_with(".z")) reportAlone(name);
  }
  if (resting()) return;
  try {
    checkRevoked();
    // Rounds opened anywhere in the job: answer each, and diagnose it if a call of this rank
    // is in flight.
    const std::int64_t rounds = store_->add("hang/rounds", 0);
    while (roundsSeen_ < rounds) {
      const std::string key = "hang/round/" + std::to_string(roundsSeen_ + 1);
      if (!store_->check({key})) break;  // numbered, not named yet
      ++roundsSeen_;
      const std::string name = rendezvous::toString(store_->get(key));
      if (!answer(name)) continue;
      std::unique_ptr<Round> round = newRound(name);
      if (!round->inFlight.empty()) pending_.push_back(std::move(round));
    }
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (collect(**it)) {
        finish(**it);
        it = pending_.erase(it);
      } else {
        ++it;
      }
    }
    storeFailed_ = false;
  } catch (const Error& e) {
    storeFailed(e);
    // Rounds whose grace passed are diagnosed with the summaries they got.
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (Clock::now() - (*it)->opened >= grace_) {
        (*it)->storeProblem = storeProblem_;
        finish(**it);
        it = pending_.erase(it);
      } else {
        ++it;
      }
    }
  }
}

std::string HangReporter::dumpState() {
  int k;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    k = ++dumps_;
  }
  std::unique_ptr<Round> round =
      newRound("d" + std::to_string(k) + ".r" + std::to_string(setup_.rank));
  round->inFlight.clear();  // asked for, not a hang: the calls' errors do not carry it
  try {
    open(round->name);
    answer(round->name);
    while (!collect(*round)) std::this_thread::sleep_for(milliseconds(20));
  } catch (const Error& e) {
    // What this rank knows: its own summary; the others' are out of reach.
    round->summaries.assign(static_cast<std::size_t>(setup_.size), std::nullopt);
    round->summaries[static_cast<std::size_t>(setup_.rank)] = summaryJson(summary(round->name));
    round->storeProblem = storeProblem() + ": " + e.what();
  }
  return finish(*round);
}

}  // namespace collx::detail
