// Recovery: Context::agree and Context::shrink (revoke is in context.cc, beside abort).
#include "recovery.h"

#include <signal.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "collx/base/config.h"
#include "collx/base/log.h"
#include "collx/base/setting.h"
#include "collx/context.h"
#include "collx/rendezvous/prefix_store.h"
#include "collx/rendezvous/store.h"
#include "diagnostics/hang_report.h"
#include "faults.h"
#include "runtime.h"

namespace collx {

namespace detail {

std::string encodeAgreement(std::uint64_t flags, const std::set<int>& failed) {
  char head[32];
  std::snprintf(head, sizeof(head), "1 %016" PRIx64 " ", flags);
  std::string out = head;
  bool first = true;
  for (int r : failed) {
    out += (first ? "" : ",") + std::to_string(r);
    first = false;
  }
  return out;
}

bool decodeAgreement(const std::string& text, int size, std::uint64_t& flags,
                     std::set<int>& failed) {
  // "1 <16 hex digits> <ranks, comma-separated, ascending>" (outside input: bounded).
  if (text.size() < 19 || text.size() > 19 + 12 * static_cast<std::size_t>(size) ||
      text.compare(0, 2, "1 ") != 0 || text[18] != ' ') {
    return false;
  }
  flags = 0;
  for (std::size_t i = 2; i < 18; ++i) {
    const char c = text[i];
    const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (digit < 0) return false;
    flags = flags << 4 | static_cast<std::uint64_t>(digit);
  }
  failed.clear();
  std::size_t at = 19;
  while (at < text.size()) {
    std::size_t end = text.find(',', at);
    if (end == std::string::npos) end = text.size();
    if (end == at || end - at > 10) return false;
    long rank = 0;
    for (std::size_t i = at; i < end; ++i) {
      if (text[i] < '0' || text[i] > '9') return false;
      rank = rank * 10 + (text[i] - '0');
    }
    if (rank >= size) return false;
    failed.insert(static_cast<int>(rank));
    at = end + 1;
    if (end + 1 == text.size()) return false;  // a trailing comma
  }
  return true;
}

std::string encodePlan(const Plan& plan) {
  std::string out = "1 " + std::to_string(plan.next) + " " + std::to_string(plan.formed) + " " +
                    std::to_string(plan.meshSize) + " " + std::to_string(plan.firstTicket) + " " +
                    std::to_string(plan.newcomers) + " ";
  for (std::size_t i = 0; i < plan.place.size(); ++i) {
    if (i) out += ",";
    out +=
        plan.old[i] >= 0 ? "o" + std::to_string(plan.old[i]) : "j" + std::to_string(plan.ticket[i]);
    out += "@" + std::to_string(plan.place[i]);
  }
  return out;
}

namespace {
// A decimal number in [0, limit] from text[at, end) (outside input).
bool number(const std::string& text, std::size_t at, std::size_t end, std::int64_t limit,
            std::int64_t& value) {
  if (end <= at || end - at > 18) return false;
  value = 0;
  for (std::size_t i = at; i < end; ++i) {
    if (text[i] < '0' || text[i] > '9') return false;
    value = value * 10 + (text[i] - '0');
  }
  return value <= limit;
}
}  // namespace

bool decodePlan(const std::string& text, Plan& plan) {
  constexpr std::int64_t kMost = std::int64_t{1} << 40;
  if (text.size() > (std::size_t{1} << 24) || text.rfind("1 ", 0) != 0) return false;
  std::size_t at = 2;
  std::int64_t fields[5];
  for (std::int64_t& field : fields) {
    const std::size_t end = text.find(' ', at);
    if (end == std::string::npos || !number(text, at, end, kMost, field)) return false;
    at = end + 1;
  }
  plan = Plan{};
  plan.next = fields[0];
  plan.formed = fields[1];
  if (fields[2] < 1 || fields[2] > (std::int64_t{1} << 24)) return false;
  plan.meshSize = static_cast<int>(fields[2]);
  plan.firstTicket = fields[3];
  if (fields[4] > fields[2]) return false;
  plan.newcomers = static_cast<int>(fields[4]);
  std::vector<bool> taken(static_cast<std::size_t>(plan.meshSize), false);
  int newcomers = 0;
  while (at < text.size()) {
    std::size_t end = text.find(',', at);
    if (end == std::string::npos) end = text.size();
    const std::size_t sign = text.find('@', at);
    if (sign == std::string::npos || sign >= end || (text[at] != 'o' && text[at] != 'j')) {
      return false;
    }
    std::int64_t who = 0, place = 0;
    if (!number(text, at + 1, sign, kMost, who) ||
        !number(text, sign + 1, end, plan.meshSize - 1, place) ||
        taken[static_cast<std::size_t>(place)]) {
      return false;
    }
    taken[static_cast<std::size_t>(place)] = true;
    const bool isNew = text[at] == 'j';
    if (!isNew && who >= plan.meshSize) return false;
    newcomers += isNew ? 1 : 0;
    plan.old.push_back(isNew ? -1 : static_cast<int>(who));
    plan.ticket.push_back(isNew ? who : 0);
    plan.place.push_back(static_cast<int>(place));
    at = end + 1;
    if (end + 1 == text.size()) return false;  // a trailing comma
  }
  return !plan.place.empty() && newcomers == plan.newcomers;
}

bool parseOutcome(const std::string& outcome, int count, std::string& word, int& rank,
                  std::string& why) {
  const std::size_t first = outcome.find(' ');
  if (first == std::string::npos) return false;
  word = outcome.substr(0, first);
  if (word != "lost" && word != "failed" && word != "late") return false;
  std::size_t space = outcome.find(' ', first + 1);
  if (space == std::string::npos) space = outcome.size();
  std::int64_t value = 0;
  if (!number(outcome, first + 1, space, count - 1, value)) return false;
  rank = static_cast<int>(value);
  why = space < outcome.size() ? outcome.substr(space + 1, 2048) : std::string();
  return true;
}

FailureCause causeOf(const std::string& why, bool stoppedHere) {
  const auto says = [&](const char* words) { return why.find(words) != std::string::npos; };
  // (The words of the transports' and the agreement's own texts: mesh.cc's silence, the
  // devices' gone() and peerGone(), agreeEntering's notes.)
  if (says("answered nothing")) {
    return stoppedHere ? FailureCause::kStopped : FailureCause::kUnreachable;
  }
  if (says("did not come within") || says("had not come") || says("an earlier agreement")) {
    return FailureCause::kExcluded;
  }
  if (says("died") || says("killed") || says("closed") || says("exited") || says("queue pair")) {
    return FailureCause::kKilled;
  }
  return FailureCause::kUnknown;
}

std::string agreeEntryKey(std::uint64_t subContext, std::uint64_t round, int rank) {
  return "agree/" + std::to_string(subContext) + "/" + std::to_string(round) + "/in/" +
         std::to_string(rank);
}

const Setting<kind::Integer> kMaxSize(
    {.name = "COLLX_MAX_SIZE",
     .component = "core",
     .defaultValue = 0,
     .range = {0, std::int64_t{1} << 24},
     .help = "The most ranks a job may grow to: Context::grow() (Python: Context.grow) appends "
             "newcomers (collx::join) beyond the job's first size up to this many ranks, once "
             "the places of the ranks lost are taken. Its places are kept in every rank's "
             "mesh, with no connection until a newcomer takes one (over tcp). Every rank of a "
             "job must set the same. 0, or at most the first size: no place beyond it."});

}  // namespace detail

namespace {

const Setting<kind::Integer> kAgreeCoordinatorFrom(
    {.name = "COLLX_AGREE_COORDINATOR_FROM",
     .component = "core",
     .defaultValue = 64,
     .range = {1, std::int64_t{1} << 30},
     .help = "Contexts of at least this many ranks agree (agree, shrink, grow, reform) through a "
             "coordinator: the lowest live rank reads every rank's entry in the store and writes "
             "the answer, the others wait for the answer alone (a store request of theirs "
             "carries one key, not one per rank; the store reads P keys per agreement, not P * "
             "P). A coordinator that dies or stops answering passes its part to the next rank; "
             "at the deadline every rank reads for itself. Smaller contexts: every rank reads "
             "every entry, one store hop sooner. Ranks may differ; the answer is one anyway."});

// The polls of the plan: the first after 50 us, each next one after twice the pause before,
// at most 50 ms apart (an answer that is there at once costs a few store requests; one that
// takes long, one poll's requests every 50 ms).
constexpr std::chrono::microseconds kFirstPause(50);
void pollPause(std::chrono::microseconds& step, std::chrono::steady_clock::time_point deadline) {
  const auto now = std::chrono::steady_clock::now();
  if (now >= deadline) return;
  std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(step, deadline - now));
  step = std::min<std::chrono::microseconds>(step * 2, std::chrono::milliseconds(50));
}

// The waits of agree and the meetings, in slices: the store wakes a wait when the last key it
// waits for comes, so a slice bounds only how late a loss, or another rank's answer, is seen
// between them. The first slice 1 ms (a TCP store's waits count whole milliseconds), each
// next twice the one before, at most 50 ms, never past the deadline (then 0: one look).
constexpr std::chrono::milliseconds kFirstSlice(1);
std::chrono::milliseconds nextSlice(std::chrono::milliseconds& step,
                                    std::chrono::steady_clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  const auto slice = std::clamp(left, std::chrono::milliseconds(0), step);
  step = std::min(step * 2, std::chrono::milliseconds(50));
  return slice;
}

// Of `ranks` (whose keys keyOf() gives), those whose key is absent now, in order, with one
// request; the others go to `came`.
std::vector<int> absentOf(rendezvous::Store& store, const std::vector<int>& ranks,
                          const std::function<std::string(int)>& keyOf, std::vector<int>& came) {
  std::vector<std::string> keys;
  keys.reserve(ranks.size());
  for (int r : ranks) keys.push_back(keyOf(r));
  const std::vector<std::string> absent = store.missing(keys);
  std::vector<int> still;
  for (std::size_t i = 0, a = 0; i < keys.size(); ++i) {
    if (a < absent.size() && absent[a] == keys[i]) {
      still.push_back(ranks[i]);
      ++a;
    } else {
      came.push_back(ranks[i]);
    }
  }
  return still;
}

// The value of `key` when it is there now, else nullopt.
std::optional<std::string> valueIfAny(rendezvous::Store& store, const std::string& key) {
  auto value = store.tryGet(key);
  if (!value) return std::nullopt;
  return rendezvous::toString(*value);
}

std::string listOf(const std::set<int>& ranks) {
  std::string out;
  int shown = 0;
  for (int r : ranks) {
    if (shown == 16) {
      out += ", ... " + std::to_string(ranks.size() - 16) + " more";
      break;
    }
    out += (shown++ ? ", " : "") + std::to_string(r);
  }
  return out;
}

}  // namespace

const char* failureCauseName(FailureCause cause) noexcept {
  switch (cause) {
    case FailureCause::kKilled:
      return "killed";
    case FailureCause::kStopped:
      return "stopped";
    case FailureCause::kUnreachable:
      return "unreachable";
    case FailureCause::kExcluded:
      return "excluded";
    case FailureCause::kUnknown:
      break;
  }
  return "unknown";
}

AgreementCost agreementCost(int size, std::int64_t coordinatorFrom, std::uint64_t round) {
  AgreementCost cost;
  if (size < 1) return cost;
  if (coordinatorFrom <= 0) coordinatorFrom = kAgreeCoordinatorFrom.get(Config::process());
  const std::uint64_t erase = round > 1 ? 1 : 0;
  const auto p = static_cast<std::uint64_t>(size);
  // A reader: its entry in, the others' entries read (one request), its proposal
  // (compareSet), the erasure; a waiter: its entry in, the answer read, the erasure.
  cost.readers = size < coordinatorFrom ? size : 1;
  cost.readerRequests = 1 + (size > 1 ? 1 : 0) + 1 + erase;
  cost.readerKeys = 1 + (p - 1) + 1 + erase;
  if (cost.readers < size) {
    cost.waiterRequests = 2 + erase;
    cost.waiterKeys = 2 + erase;
  }
  cost.storeKeys = static_cast<std::uint64_t>(cost.readers) * cost.readerKeys +
                   (p - static_cast<std::uint64_t>(cost.readers)) * cost.waiterKeys;
  return cost;
}

Agreement Context::agree(std::uint64_t flags, std::optional<std::chrono::milliseconds> timeout) {
  const Where where{rank_, "agree", -1};
  if (!runtime_) throw InvalidArgument(where, "the context has no transports");
  const std::chrono::milliseconds wait = timeout.value_or(timeout_);
  if (wait.count() <= 0) {
    throw InvalidArgument(
        where, "the timeout must be positive, got " + std::to_string(wait.count()) + " ms");
  }
  return agreeEntering(flags, wait, {});
}

Agreement Context::agreeEntering(std::uint64_t flags, std::chrono::milliseconds wait,
                                 const std::function<void(const std::vector<int>&)>& entering) {
  using Clock = std::chrono::steady_clock;
  Where where{rank_, "agree", -1};
  if (runtime_->replaced.load()) runtime_->throwOver(where);
  const std::uint64_t round = runtime_->agreements.fetch_add(1) + 1;
  where.op = "agree#" + std::to_string(round);
  const auto start = Clock::now();
  const auto deadline = start + wait;
  const std::string decisionKey =
      "agree/" + std::to_string(subContext_) + "/" + std::to_string(round) + "/decision";
  auto entryKey = [&](int r) { return detail::agreeEntryKey(subContext_, round, r); };
  transport::Mesh& mesh = runtime_->engine->mesh();

  // What this rank knows failed: the rank that its context's error names as the one that
  // broke (an IoError: a death, a closed or silent connection; not a timeout, a mismatch,
  // an abort or a revoke, whose ranks may well live).
  std::set<int> failed;
  std::map<int, std::string> why;  // for the log
  auto contextRank = [&](int meshRank) {
    if (runtime_->meshRanks.empty()) return meshRank < size_ ? meshRank : -1;
    auto it = std::find(runtime_->meshRanks.begin(), runtime_->meshRanks.end(), meshRank);
    return it == runtime_->meshRanks.end() ? -1
                                           : static_cast<int>(it - runtime_->meshRanks.begin());
  };
  if (const std::exception_ptr error = runtime_->engine->failure()) {
    try {
      std::rethrow_exception(error);
    } catch (const Error& e) {
      const int r = e.kind() == ErrorKind::kIo ? contextRank(e.peer()) : -1;
      if (r >= 0 && r != rank_) {
        failed.insert(r);
        why[r] = e.what();
      }
    }
  }
  {
    std::lock_guard<std::mutex> lock(runtime_->failedMutex);
    for (int r : runtime_->agreedFailed) {
      if (failed.insert(r).second) why[r] = "an earlier agreement found it failed";
    }
  }
  if (entering) entering(std::vector<int>(failed.begin(), failed.end()));
  store_->set(entryKey(rank_), detail::encodeAgreement(flags, failed));
  detail::faultAt("agree.entered", rank_);

  std::map<int, std::uint64_t> flagsOf{{rank_, flags}};
  std::vector<int> awaited;
  for (int r = 0; r < size_; ++r) {
    if (r != rank_ && failed.count(r) == 0) awaited.push_back(r);
  }
  // The entries of `ranks` (their flags, and whom they found failed) into this rank's view.
  auto absorb = [&](const std::vector<int>& ranks, const std::vector<rendezvous::Bytes>& values) {
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      std::uint64_t theirFlags = 0;
      std::set<int> theirFailed;
      if (!detail::decodeAgreement(rendezvous::toString(values[i]), size_, theirFlags,
                                   theirFailed)) {
        COLLX_WARN(kCore,
                   "rank {}: {}: rank {}'s entry in the store is malformed; it counts "
                   "as flags 0 and no failures",
                   rank_, where.op, ranks[i]);
      }
      flagsOf[ranks[i]] = theirFlags;
      for (int f : theirFailed) {
        if (failed.insert(f).second) why[f] = "rank " + std::to_string(ranks[i]) + " found it so";
      }
    }
  };
  auto keysOf = [&](const std::vector<int>& ranks) {
    std::vector<std::string> keys;
    keys.reserve(ranks.size());
    for (int r : ranks) keys.push_back(entryKey(r));
    return keys;
  };
  // Who reads the entries. Below COLLX_AGREE_COORDINATOR_FROM ranks every rank does (the
  // last entry in ends every rank's wait: no hop more). From there on one rank does, the
  // coordinator (the lowest this rank does not know failed), and the others wait for the
  // answer alone, watching it: each one's requests carry a key or two instead of P, the
  // store's P keys instead of P * P. A coordinator lost meanwhile (its connection, its
  // silence) passes the part to the next; at the deadline every rank reads for itself.
  // A reader waits for the awaited entries (all of them in one slice, at once when they
  // are there); between slices it takes those that came, drops the ranks lost meanwhile,
  // and looks for an answer another rank gave. Any reader that has every entry it awaits
  // proposes; the first proposal is every rank's answer.
  std::set<int> passed;  // coordinators this rank saw lost (not failed: their entries count)
  auto coordinatorNow = [&] {
    for (int r = 0; r < size_; ++r) {
      if (failed.count(r) == 0 && passed.count(r) == 0) return r;
    }
    return rank_;
  };
  int coordinator = size_ < kAgreeCoordinatorFrom.get(Config::process()) ? rank_ : coordinatorNow();
  std::string decided;
  auto step = kFirstSlice;
  while (true) {
    if (coordinator != rank_) {
      if (auto answer = store_->tryMultiGet({decisionKey}, nextSlice(step, deadline))) {
        decided = rendezvous::toString(answer->front());
        break;
      }
      if (!mesh.lost(runtime_->meshRank(coordinator), {}).empty()) {
        COLLX_DEBUG(kCore, "rank {}: {}: coordinator rank {} is lost; the next takes its part",
                    rank_, where.op, coordinator);
        passed.insert(coordinator);
        coordinator = coordinatorNow();
      }
      if (Clock::now() >= deadline) coordinator = rank_;
      if (coordinator == rank_) step = kFirstSlice;  // (late: one look)
      continue;
    }
    if (!awaited.empty()) {
      if (auto values = store_->tryMultiGet(keysOf(awaited), nextSlice(step, deadline))) {
        absorb(awaited, *values);
        awaited.clear();
      } else {
        std::vector<int> came;
        const std::vector<int> still = absentOf(*store_, awaited, entryKey, came);
        if (!came.empty()) absorb(came, store_->multiGet(keysOf(came), wait));
        awaited.clear();
        for (int r : still) {
          if (failed.count(r) != 0) continue;
          const std::string lost = mesh.lost(runtime_->meshRank(r), {});
          if (!lost.empty()) {
            failed.insert(r);
            why[r] = lost;
            continue;
          }
          awaited.push_back(r);
        }
      }
    }
    const bool late = Clock::now() >= deadline;
    if (awaited.empty() || late) {
      for (int r : awaited) {
        failed.insert(r);
        why[r] = "it did not come within " + std::to_string(wait.count()) + " ms";
      }
      std::uint64_t all = ~std::uint64_t{0};
      for (const auto& [r, f] : flagsOf) {
        if (failed.count(r) == 0) all &= f;
      }
      decided = rendezvous::toString(store_->compareSet(
          decisionKey, {}, rendezvous::toBytes(detail::encodeAgreement(all, failed))));
      break;
    }
    if (auto answer = store_->tryGet(decisionKey)) {
      decided = rendezvous::toString(*answer);
      break;
    }
  }

  Agreement result;
  std::set<int> agreedFailed;
  if (!detail::decodeAgreement(decided, size_, result.flags, agreedFailed)) {
    throw MismatchError(where,
                        "the store holds a malformed agreement: '" + decided.substr(0, 200) + "'");
  }
  result.failed.assign(agreedFailed.begin(), agreedFailed.end());
  // Why each one failed, from what this rank saw of it: its own evidence first (the error
  // that failed this context, a loss it found while waiting), else what its pair says now.
  for (int r : result.failed) {
    FailedRank f;
    f.rank = r;
    auto it = why.find(r);
    const bool told = it == why.end() || it->second.find(" found it so") != std::string::npos;
    const std::string seen = told && r != rank_ ? mesh.lost(runtime_->meshRank(r), {}) : "";
    // (Nothing seen here: it still answers this rank, and the others left it out.)
    f.why = !seen.empty()     ? seen
            : it != why.end() ? it->second
                              : "the agreement left it out, where this rank saw nothing wrong "
                                "with it (it had not come in time for the rank that answered)";
    const PeerInfo& peer = peers_[static_cast<std::size_t>(r)];
    const bool here = hostIdentity(peer) == hostIdentity(peers_[static_cast<std::size_t>(rank_)]);
    f.cause = detail::causeOf(f.why,
                              here && peer.pid > 0 && ::kill(static_cast<pid_t>(peer.pid), 0) == 0);
    result.causes.push_back(std::move(f));
  }
  {
    std::lock_guard<std::mutex> lock(runtime_->failedMutex);
    runtime_->agreedFailed.insert(agreedFailed.begin(), agreedFailed.end());
  }
  detail::faultAt("agree.decided", rank_);
  const auto tookMs =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
  if (!agreedFailed.empty()) {
    std::string reasons;
    for (int r : agreedFailed) {
      auto it = why.find(r);
      if (it != why.end()) reasons += "; rank " + std::to_string(r) + ": " + it->second;
    }
    COLLX_DEBUG(kCore, "rank {}: {}: flags {:#x}, failed ranks {} in {} ms{}", rank_, where.op,
                result.flags, listOf(agreedFailed), tookMs, reasons);
  } else {
    COLLX_DEBUG(kCore, "rank {}: {}: flags {:#x}, no rank failed, in {} ms", rank_, where.op,
                result.flags, tookMs);
  }
  if (agreedFailed.count(rank_) != 0) {
    throw ExcludedError(where,
                        "the other ranks agreed without this one: they found it failed "
                        "(its connection to one of them broke, it answered nothing for "
                        "COLLX_PEER_TIMEOUT, or it came after their deadline); this "
                        "context is over for it (collx::join() brings the process back as "
                        "a newcomer, when the others take one in: grow(), reform())");
  }
  // Each rank erases its entry of the agreement before this one (every rank that waited for
  // it has an answer there to read instead), so the first agreement of a context erases
  // nothing and a context keeps one round of entries (the answers stay: a rank that was
  // excluded may come to read one late). The last round's go with the context's keys.
  if (round > 1) {
    try {
      store_->erase(detail::agreeEntryKey(subContext_, round - 1, rank_));
    } catch (const Error& e) {
      COLLX_DEBUG(kCore, "rank {}: {}: erasing its entry of the agreement before: {}", rank_,
                  where.op, e.what());
    }
  }
  return result;
}

namespace detail {

std::string meet(rendezvous::Store& store, const std::string& phase, int self, int count,
                 const std::string& mine, const std::string& failure,
                 const std::function<std::string(int)>& lostOf, std::chrono::milliseconds wait) {
  using Clock = std::chrono::steady_clock;
  const std::string outcomeKey = phase + "/outcome";
  if (!failure.empty()) {
    return rendezvous::toString(store.compareSet(
        outcomeKey, {}, rendezvous::toBytes("failed " + std::to_string(self) + " " + failure)));
  }
  store.set(readyKey(phase, self), mine);
  std::vector<int> awaited;
  for (int i = 0; i < count; ++i) {
    if (i != self) awaited.push_back(i);
  }
  const auto deadline = Clock::now() + wait;
  auto step = kFirstSlice;
  auto keysOf = [&](const std::vector<int>& members) {
    std::vector<std::string> keys;
    keys.reserve(members.size());
    for (int i : members) keys.push_back(readyKey(phase, i));
    return keys;
  };
  while (true) {
    // All the others in one slice (at once when they are there), else who is still missing.
    std::string proposal;
    if (!awaited.empty() && !store.tryMultiGet(keysOf(awaited), nextSlice(step, deadline))) {
      std::vector<int> came;
      awaited = absentOf(
          store, awaited, [&](int i) { return readyKey(phase, i); }, came);
      for (int i : awaited) {
        const std::string lost = lostOf(i);
        if (!lost.empty()) {
          proposal = "lost " + std::to_string(i) + " " + lost;
          break;
        }
      }
    } else {
      awaited.clear();
    }
    if (proposal.empty() && awaited.empty()) proposal = "ok";
    if (proposal.empty() && Clock::now() >= deadline) {
      proposal = "late " + std::to_string(awaited.front());
    }
    if (!proposal.empty()) {
      return rendezvous::toString(store.compareSet(outcomeKey, {}, rendezvous::toBytes(proposal)));
    }
    if (auto known = store.tryGet(outcomeKey)) return rendezvous::toString(*known);
  }
}

}  // namespace detail

namespace {

// The checks shrink, grow and reform share: a context with transports, not a sub-context,
// not over; the timeout positive.
std::chrono::milliseconds recoveryWait(const Where& where, const detail::Runtime* runtime,
                                       bool subContext,
                                       std::optional<std::chrono::milliseconds> timeout,
                                       std::chrono::milliseconds fallback) {
  if (!runtime) throw InvalidArgument(where, "the context has no transports");
  if (subContext) {
    throw InvalidArgument(where, "a sub-context does not " + where.op +
                                     " (its parent's connections are not its own): " + where.op +
                                     " the context it was split from");
  }
  if (runtime->replaced.load()) runtime->throwOver(where);
  const std::chrono::milliseconds wait = timeout.value_or(fallback);
  if (wait.count() <= 0) {
    throw InvalidArgument(
        where, "the timeout must be positive, got " + std::to_string(wait.count()) + " ms");
  }
  return wait;
}

}  // namespace

struct Context::Left {
  std::uint64_t attempt = 0;
  std::vector<bool> kept;  // by mesh rank
  bool everyone = false;   // every member left before agreeing: no meeting after
};

// Bit 0 of shrink()'s agreement: this rank left the generation before its entry went in.
constexpr std::uint64_t kLeftBefore = 1;

std::shared_ptr<Context> Context::shrink(std::optional<std::chrono::milliseconds> timeout) {
  const auto wait = recoveryWait(Where{rank_, "shrink", -1}, runtime_.get(), parent_ != nullptr,
                                 timeout, timeout_);
  const auto deadline = std::chrono::steady_clock::now() + wait;
  // After a failure (the generation's calls fail everywhere: a failed mesh tells every
  // peer), this rank leaves the generation (its pairs with the ranks it knows alive go on in
  // the next) before its entry in the agreement goes in. When every survivor did, an answer
  // is there only once every rank it names has left: no frame of the next generation can
  // reach a rank still in this one, and the agreement was the survivors' meeting. A rank
  // whose context is healthy leaves after the answer (another may still be finishing its
  // last call with it), and then all meet. The answer names every failure this rank knew
  // (the rank that answered read its entry), perhaps more: those pairs end after it.
  const bool early = runtime_->engine->failure() != nullptr;
  std::optional<Left> left;
  std::function<void(const std::vector<int>&)> leave;
  if (early) {
    leave = [&](const std::vector<int>& failed) {
      Left l;
      l.attempt = runtime_->shrinks.fetch_add(1) + 1;
      l.kept.assign(static_cast<std::size_t>(runtime_->engine->mesh().size()), false);
      for (int r = 0; r < size_; ++r) {
        if (!std::binary_search(failed.begin(), failed.end(), r)) {
          l.kept[static_cast<std::size_t>(runtime_->meshRank(r))] = true;
        }
      }
      runtime_->engine->reform(generation_ + static_cast<std::int64_t>(l.attempt), l.kept,
                               deadline);
      left = std::move(l);
      detail::faultAt("regroup.reformed", rank_);
    };
  }
  const Agreement agreed = agreeEntering(early ? ~std::uint64_t{0} : ~kLeftBefore, wait, leave);
  if (left) left->everyone = (agreed.flags & kLeftBefore) != 0;
  return regroup(agreed, 0, false, std::chrono::milliseconds(0), wait, nullptr,
                 left ? &*left : nullptr);
}

std::shared_ptr<Context> Context::grow(int count,
                                       std::optional<std::chrono::milliseconds> timeout) {
  const Where where{rank_, "grow", -1};
  const auto wait = recoveryWait(where, runtime_.get(), parent_ != nullptr, timeout, timeout_);
  const int places = runtime_->engine->mesh().size() - size_;
  if (count < 1 || count > places) {
    throw InvalidArgument(
        where, "grow(" + std::to_string(count) + "): a newcomer takes the place of a rank lost " +
                   "since the job formed, or one kept beyond its first size up to " +
                   "COLLX_MAX_SIZE (ContextOptions::maxSize), and this context has " +
                   std::to_string(places) + " such place" + (places == 1 ? "" : "s") +
                   " (count in [1, " + std::to_string(places) + "])");
  }
  const Agreement agreed = agree(~std::uint64_t{0}, wait);
  return regroup(agreed, count, false, wait, wait, nullptr);
}

Reformed Context::reform(std::optional<std::chrono::milliseconds> timeout,
                         std::optional<std::chrono::milliseconds> replacementWait) {
  const Where where{rank_, "reform", -1};
  const auto wait = recoveryWait(where, runtime_.get(), parent_ != nullptr, timeout, timeout_);
  const auto joinWait = replacementWait.value_or(std::chrono::milliseconds(0));
  if (joinWait.count() < 0) {
    throw InvalidArgument(where, "the replacements' wait must not be negative, got " +
                                     std::to_string(joinWait.count()) + " ms");
  }
  // After a failure, every call still pending on every rank ends (a rank that the failure
  // did not reach over a connection learns it from the store's record, and comes here too).
  // A healthy context is not revoked: a rank still finishing its last call would fail.
  if (const std::exception_ptr error = runtime_->engine->failure()) {
    try {
      std::rethrow_exception(error);
    } catch (const Error& e) {
      revoke("reform() after: " + e.detail());
    }
  }
  const Agreement agreed = agree(~std::uint64_t{0}, wait);
  Reformed out;
  std::vector<int> members;
  out.context = regroup(agreed, -1, true, joinWait, wait, &members);
  out.failed = agreed.failed;
  out.causes = agreed.causes;
  out.rankOf.assign(static_cast<std::size_t>(size_), -1);
  for (std::size_t i = 0; i < members.size(); ++i) {
    if (members[i] >= 0) {
      out.rankOf[static_cast<std::size_t>(members[i])] = static_cast<int>(i);
    } else {
      out.joined.push_back(static_cast<int>(i));
    }
  }
  return out;
}

std::shared_ptr<Context> Context::regroup(const Agreement& agreed, int wanted, bool inPlace,
                                          std::chrono::milliseconds joinWait,
                                          std::chrono::milliseconds wait,
                                          std::vector<int>* membersOut, const Left* left) {
  using Clock = std::chrono::steady_clock;
  const char* name = wanted == 0 ? "shrink" : inPlace ? "reform" : "grow";
  const auto start = Clock::now();
  const auto deadline = start + wait;
  // Every member makes the same attempts (an attempt fails on all of them alike, below):
  // the k-th takes generation + k, whose namespace no earlier attempt used.
  const std::uint64_t attempt = left ? left->attempt : runtime_->shrinks.fetch_add(1) + 1;
  const std::int64_t next = generation_ + static_cast<std::int64_t>(attempt);
  Where where{rank_, std::string(name) + "(generation " + std::to_string(next) + ")", -1};
  transport::Mesh& mesh = runtime_->engine->mesh();
  const int meshSize = mesh.size();

  // The places newcomers may take: the failed ranks' (in their order), then those of the
  // mesh that no rank of this context holds (lost before).
  std::set<int> failed(agreed.failed.begin(), agreed.failed.end());
  std::vector<int> places;
  places.reserve(static_cast<std::size_t>(meshSize));
  for (int f : agreed.failed) places.push_back(runtime_->meshRank(f));
  {
    std::vector<bool> held(static_cast<std::size_t>(meshSize), false);
    for (int r = 0; r < size_; ++r) held[static_cast<std::size_t>(runtime_->meshRank(r))] = true;
    for (int m = 0; m < meshSize; ++m) {
      if (!held[static_cast<std::size_t>(m)]) places.push_back(m);
    }
  }
  if (wanted < 0) wanted = static_cast<int>(agreed.failed.size());
  wanted = std::min(wanted, static_cast<int>(places.size()));
  // Newcomers join over tcp: a job without it (COLLX_TRANSPORT=shm or ibverbs) takes none;
  // reform() then shrinks (every rank alike: the setting is the job's).
  const std::string& forced = mesh.options().transport;
  if (wanted > 0 && forced != "auto" && forced != "tcp") {
    if (!inPlace) {
      throw Unsupported(where, "newcomers join over tcp, and this job has COLLX_TRANSPORT=" +
                                   forced + ": no newcomer can join it");
    }
    COLLX_WARN(kCore,
               "rank {}: reform: COLLX_TRANSPORT={}: newcomers join over tcp, so none is "
               "taken; the survivors go on without the failed ranks",
               rank_, forced);
    wanted = 0;
  }

  // The members: this context's survivors (and the newcomers) in their new order, decided
  // once in the store when newcomers come (the first survivor to see them proposes).
  detail::Plan plan;
  auto survivorsWith = [&](int newcomers, std::int64_t firstTicket) {
    detail::Plan p;
    p.next = next;
    p.formed = mesh.options().generation;
    p.meshSize = meshSize;
    p.firstTicket = firstTicket;
    p.newcomers = newcomers;
    int taken = 0;
    auto addNewcomer = [&](int place) {
      p.old.push_back(-1);
      p.ticket.push_back(firstTicket + taken++);
      p.place.push_back(place);
    };
    for (int r = 0, f = 0; r < size_; ++r) {
      if (failed.count(r) == 0) {
        p.old.push_back(r);
        p.ticket.push_back(0);
        p.place.push_back(runtime_->meshRank(r));
      } else if (inPlace && taken < newcomers) {
        addNewcomer(places[static_cast<std::size_t>(f++)]);
      }
    }
    while (taken < newcomers) addNewcomer(places[static_cast<std::size_t>(taken)]);
    return p;
  };
  if (wanted == 0) {
    plan = survivorsWith(0, 0);
  } else {
    const std::string planKey = std::string(name) + "/" + std::to_string(attempt) + "/plan";
    const auto joinDeadline = start + joinWait;
    std::string decided;
    auto step = kFirstPause;
    while (true) {
      if (auto known = valueIfAny(*store_, planKey)) {
        decided = std::move(*known);
        break;
      }
      std::int64_t first = 1;
      if (auto text = valueIfAny(*rootStore_, detail::joinsKey(jobId_, "next"))) {
        first = std::max<std::int64_t>(1, std::atoll(text->c_str()));
      }
      const std::int64_t waiting =
          rootStore_->add(detail::joinsKey(jobId_, "count"), 0) - first + 1;
      const int take = static_cast<int>(std::clamp<std::int64_t>(waiting, 0, wanted));
      if (take == wanted || Clock::now() >= joinDeadline) {
        const std::string proposal =
            take < wanted && !inPlace ? "none" : detail::encodePlan(survivorsWith(take, first));
        decided =
            rendezvous::toString(store_->compareSet(planKey, {}, rendezvous::toBytes(proposal)));
        break;
      }
      pollPause(step, joinDeadline);
    }
    if (decided == "none") {
      throw TimeoutError(where, "fewer than " + std::to_string(wanted) + " newcomer" +
                                    (wanted == 1 ? "" : "s") + " came within " +
                                    std::to_string(joinWait.count()) +
                                    " ms (collx::join); this context goes on as it was");
    }
    if (!detail::decodePlan(decided, plan) || plan.next != next) {
      throw MismatchError(where,
                          "the store holds a malformed plan: '" + decided.substr(0, 200) + "'");
    }
    if (plan.meshSize != meshSize) {
      throw MismatchError(where, "the plan is for a job of at most " +
                                     std::to_string(plan.meshSize) + " ranks, and this rank's " +
                                     "allows " + std::to_string(meshSize) +
                                     ": every rank must set the same COLLX_MAX_SIZE");
    }
    // The newcomers learn their places; the next plan takes the tickets after theirs.
    for (std::size_t i = 0; i < plan.ticket.size(); ++i) {
      if (plan.ticket[i] > 0) {
        rootStore_->set(detail::joinsKey(jobId_, std::to_string(plan.ticket[i]) + "/plan"),
                        decided);
      }
    }
    rootStore_->set(detail::joinsKey(jobId_, "next"),
                    std::to_string(plan.firstTicket + plan.newcomers));
  }
  std::vector<int> members;  // old ranks, -1 - i for the i-th newcomer
  std::vector<int> slots;    // the newcomers' places
  std::vector<bool> keep(static_cast<std::size_t>(meshSize), false);
  for (std::size_t i = 0; i < plan.old.size(); ++i) {
    if (plan.old[i] >= 0) {
      if (plan.old[i] >= size_ || failed.count(plan.old[i]) != 0) {
        throw MismatchError(where, "the plan names rank " + std::to_string(plan.old[i]) +
                                       ", which is no survivor here");
      }
      members.push_back(plan.old[i]);
      keep[static_cast<std::size_t>(runtime_->meshRank(plan.old[i]))] = true;
    } else {
      members.push_back(-1 - static_cast<int>(slots.size()));
      slots.push_back(plan.place[i]);
    }
  }
  const int newRank =
      static_cast<int>(std::find(members.begin(), members.end(), rank_) - members.begin());
  detail::faultAt("regroup.planned", rank_);
  // This generation ends on this rank (every call of it fails), the pairs with the survivors
  // go on in the next; or it ended before the agreement, and the pairs with the ranks it
  // found failed end now.
  if (left) {
    std::vector<int> gone;
    for (int m = 0; m < meshSize; ++m) {
      if (left->kept[static_cast<std::size_t>(m)] && !keep[static_cast<std::size_t>(m)]) {
        gone.push_back(m);
      }
    }
    runtime_->engine->drop(gone, "the survivors agreed that the peer failed", deadline);
  } else {
    runtime_->engine->reform(next, keep, deadline);
    detail::faultAt("regroup.reformed", rank_);
  }

  rendezvous::StoreOptions storeOptions;
  storeOptions.timeout = wait;
  storeOptions.rank = newRank;
  auto store = std::make_shared<rendezvous::PrefixStore>(
      "collx/" + jobId_ + "/" + std::to_string(next), rootStore_, storeOptions);
  auto placeOf = [&](int i) {
    const int m = members[static_cast<std::size_t>(i)];
    return m >= 0 ? runtime_->meshRank(m) : slots[static_cast<std::size_t>(-1 - m)];
  };
  // An outcome other than "ok" fails the attempt on every member alike: the new generation
  // fails here (naming the rank lost, for the next agreement; a member that could not go on
  // names nobody) and shrink(), grow() or reform() may be called again.
  auto failAttempt = [&](const std::string& outcome) {
    std::string word, why;
    int lost = -1;
    if (!detail::parseOutcome(outcome, static_cast<int>(members.size()), word, lost, why)) {
      throw MismatchError(where,
                          "the store holds a malformed outcome: '" + outcome.substr(0, 200) + "'");
    }
    const int old = members[static_cast<std::size_t>(lost)];
    const std::string who =
        old >= 0 ? "rank " + std::to_string(old) : "the newcomer for rank " + std::to_string(lost);
    const std::string again = ": call " + std::string(name) + "() again";
    const std::string text =
        word == "lost" ? who + " was lost before the members went on (" + why + ")" + again
        : word == "failed"
            ? who + " could not go on (" + why + ")" + again
            : who + " did not come within " + std::to_string(wait.count()) + " ms" + again;
    // (Named by its mesh rank there, as the transport names ranks; nobody for "failed".)
    const int culprit = word == "failed" ? -1 : placeOf(lost);
    runtime_->engine->stop(ErrorKind::kIo, culprit, text);
    throw IoError(Where{rank_, where.op, word == "failed" ? -1 : old}, text);
  };
  // Before the newcomers connect, every member says where it is (its address blob), or the
  // attempt fails fast on all of them when one is lost meanwhile (nobody then waits out a
  // connect to a member that is gone). A newcomer is told nothing of (it has no pair yet).
  // The newcomers dial every member of lower place and are dialled by the others, as
  // connect() pairs ranks.
  std::string failure;
  if (!slots.empty()) {
    std::string mine;
    try {
      const int at = runtime_->meshRank(rank_);
      const bool listen = std::any_of(slots.begin(), slots.end(), [&](int s) { return s > at; });
      mine = runtime_->engine->joinAddress(listen, deadline);
    } catch (const Error& e) {
      failure = e.what();
    }
    const auto since = Clock::now();
    const std::string published = detail::meet(
        *store, "grow", newRank, static_cast<int>(members.size()), mine, failure,
        [&](int i) {
          const int m = members[static_cast<std::size_t>(i)];
          return m >= 0 ? mesh.lost(runtime_->meshRank(m), since) : std::string();
        },
        wait);
    if (published != "ok") failAttempt(published);
    detail::faultAt("regroup.met", rank_);
    try {
      std::vector<std::string> keys;
      keys.reserve(slots.size());
      for (std::size_t i = 0; i < members.size(); ++i) {
        if (members[i] < 0) keys.push_back(detail::readyKey("grow", static_cast<int>(i)));
      }
      const std::vector<rendezvous::Bytes> blobs = store->multiGet(keys, wait);
      std::vector<std::string> addresses;
      addresses.reserve(blobs.size());
      for (const auto& blob : blobs) addresses.push_back(rendezvous::toString(blob));
      runtime_->engine->welcome(slots, addresses, deadline);
      detail::faultAt("regroup.connected", rank_);
    } catch (const Error& e) {
      failure = e.what();
    }
  }
  // The members meet in the new generation (unless every one left before agreeing: the
  // agreement was their meeting).
  if (!left || !left->everyone || !slots.empty()) {
    PeerInfo self = peers_[static_cast<std::size_t>(rank_)];
    const auto met = Clock::now();
    const std::string outcome = detail::meet(
        *store, "shrink", newRank, static_cast<int>(members.size()),
        rendezvous::toString(detail::encodePeerInfo(self)), failure,
        [&](int i) { return mesh.lost(placeOf(i), met); }, wait);
    if (outcome != "ok") failAttempt(outcome);
  }
  // Every member has re-formed: their pairs may carry the new generation's first messages.
  runtime_->engine->resume(deadline);
  std::vector<std::pair<int, PeerInfo>> newcomers;
  if (!slots.empty()) {
    std::vector<std::string> keys;
    std::vector<int> ranks;
    for (std::size_t i = 0; i < members.size(); ++i) {
      if (members[i] < 0) {
        keys.push_back(detail::readyKey("shrink", static_cast<int>(i)));
        ranks.push_back(static_cast<int>(i));
      }
    }
    const std::vector<rendezvous::Bytes> records = store->multiGet(keys, wait);
    for (std::size_t k = 0; k < records.size(); ++k) {
      newcomers.emplace_back(slots[k], detail::decodePeerInfo(ranks[k], records[k]));
    }
  }
  auto formed = std::make_shared<Context>(Key{}, *this, members, next, newcomers);
  runtime_->replaced = true;
  // The next generation's reports go through this one's connection to the store, and the
  // watcher's thread goes on (started before this generation's reports end).
  formed->startReporter(Config::process(), reporter_.get());
  if (reporter_) reporter_->stop();  // this generation's reports are over
  COLLX_DEBUG(kCore,
              "rank {}: {}: generation {} of {} ranks (failed: {}; newcomers: {}), rank {} "
              "there, in {:.2f} ms",
              rank_, name, next, members.size(), listOf(failed), slots.size(), newRank,
              std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  if (membersOut) *membersOut = members;
  return formed;
}

}  // namespace collx
