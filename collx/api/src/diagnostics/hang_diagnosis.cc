#include "hang_diagnosis.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "collx/algorithms/registry.h"
#include "collx/base/data_type.h"
#include "collx/base/error.h"
#include "collx/base/file_name.h"
#include "collx/base/json_error.h"
#include "collx/base/reduce_op.h"

namespace collx::detail {

namespace {

using Json = nlohmann::ordered_json;  // keys in the order written: readable in the store
using algorithms::CallRecord;
using algorithms::CallState;
using algorithms::WaitKind;
using Summaries = std::vector<std::optional<Summary>>;

// ---- summaries ---------------------------------------------------------------------------

// Cuts of the texts a summary carries, so that it stays within kMaxSummaryBytes.
constexpr std::size_t kMaxNameBytes = 32;
constexpr std::size_t kMaxRoundBytes = 64;
constexpr std::size_t kMaxViaBytes = 96;
constexpr std::size_t kMaxFailedBytes = 400;

std::string cut(std::string text, std::size_t max) {
  if (text.size() > max) text.resize(max);
  return text;
}

std::string firstLine(const std::string& text) { return text.substr(0, text.find('\n')); }

std::int64_t msBetween(std::int64_t fromNs, std::int64_t toNs) {
  return std::max<std::int64_t>(0, (toNs - fromNs) / 1'000'000);
}

const char* waitWhat(WaitKind kind) {
  switch (kind) {
    case WaitKind::kSend:
      return "send";
    case WaitKind::kRecv:
      return "recv";
    case WaitKind::kShared:
      return "shm";
    case WaitKind::kNone:
      break;
  }
  return "";
}

SummaryCall callOf(const CallRecord& r, std::int64_t nowNs, const SummaryInput& input) {
  SummaryCall c;
  c.id = r.id;
  c.seq = r.seq;
  c.p2p = r.space == transport::Space::kPointToPoint;
  const auto coll = static_cast<algorithms::Collective>(r.fingerprint.coll);
  const std::string algorithm = r.algorithm != nullptr ? r.algorithm : "";
  if (c.p2p) {
    // The engine names a point-to-point call "send" or "recv" where it can; else its wait says.
    if (algorithm == "send" || algorithm == "recv") {
      c.collective = algorithm;
    } else if (r.waitKind == WaitKind::kSend || r.waitKind == WaitKind::kRecv) {
      c.collective = waitWhat(r.waitKind);
    } else {
      c.collective = "send/recv";
    }
  } else {
    c.collective = algorithms::collectiveName(coll);
    c.algorithm = cut(algorithm, kMaxNameBytes);
    if (algorithms::reduces(coll)) {
      c.op = reduceOpKindName(static_cast<ReduceOpKind>(r.fingerprint.op));
    }
  }
  c.dtype = dataTypeName(static_cast<DataType>(r.fingerprint.dtype));
  c.count = r.fingerprint.count;
  c.root = r.fingerprint.root;
  c.peer = r.peer;
  if (r.state == CallState::kQueued) {
    c.state = "queued";
  } else {
    c.state = r.waitKind != WaitKind::kNone ? "waiting" : "running";
  }
  if (r.waitKind != WaitKind::kNone) {
    c.step = r.step;
    c.steps = r.steps;
    c.waitPeer = r.waitPeer;
    c.waitWhat = waitWhat(r.waitKind);
    c.waitBytes = r.waitBytes;
    if (r.waitKind == WaitKind::kShared) {
      c.waitVia = "shared memory";
    } else if (input.describePeer && r.waitPeer >= 0) {
      c.waitVia = cut(input.describePeer(r.waitPeer), kMaxViaBytes);
    }
  }
  c.sinceMs = r.admittedNs != 0 ? msBetween(r.admittedNs, nowNs) : 0;  // 0: short so far
  return c;
}

Json toJson(const SummaryCall& c) {
  return Json{{"id", c.id},
              {"seq", c.seq},
              {"p2p", c.p2p},
              {"collective", c.collective},
              {"algorithm", c.algorithm},
              {"dtype", c.dtype},
              {"op", c.op},
              {"count", c.count},
              {"root", c.root},
              {"peer", c.peer},
              {"state", c.state},
              {"step", c.step},
              {"steps", c.steps},
              {"wait_peer", c.waitPeer},
              {"wait_what", c.waitWhat},
              {"wait_bytes", c.waitBytes},
              {"wait_via", c.waitVia},
              {"since_ms", c.sinceMs}};
}

Json toJson(const Summary& s) {
  Json calls = Json::array();
  for (const SummaryCall& c : s.calls) calls.push_back(toJson(c));
  Json last = nullptr;
  if (s.lastSeq) last = Json{{"seq", *s.lastSeq}, {"collective", s.lastCollective}};
  return Json{{"rank", s.rank},      {"round", s.round},  {"next_seq", s.nextSeq},
              {"idle_ms", s.idleMs}, {"last", last},      {"in_flight", s.inFlight},
              {"calls", calls},      {"failed", s.failed}};
}

// Invalid UTF-8 (a text cut mid-character, bytes from an error message) becomes U+FFFD
// instead of an exception.
std::string dump(const Json& j, int indent = -1) {
  return j.dump(indent, ' ', false, Json::error_handler_t::replace);
}

// Reads a summary's fields, each error naming the rank and the field's path.
class FieldReader {
 public:
  FieldReader(int rank, int reader) : rank_(rank), reader_(reader) {}

  [[noreturn]] void bad(const std::string& what) const {
    throw IoError(Where{reader_, "hang report", rank_}, "its summary is malformed: " + what);
  }

  const Json& field(const Json& obj, const char* key, const std::string& path) const {
    if (!obj.is_object()) {
      bad((path.empty() ? "the summary" : "'" + path + "'") + " must be an object, not " +
          obj.type_name());
    }
    auto it = obj.find(key);
    if (it == obj.end()) bad("'" + join(path, key) + "' is missing");
    return *it;
  }
  std::uint64_t u64(const Json& obj, const char* key, const std::string& path,
                    std::uint64_t max = std::numeric_limits<std::uint64_t>::max()) const {
    const Json& v = field(obj, key, path);
    if (!v.is_number_unsigned() || v.get<std::uint64_t>() > max) {
      bad("'" + join(path, key) + "' must be an integer in [0, " + std::to_string(max) + "], not " +
          shown(v));
    }
    return v.get<std::uint64_t>();
  }
  std::int64_t i64(const Json& obj, const char* key, const std::string& path, std::int64_t min,
                   std::int64_t max) const {
    const Json& v = field(obj, key, path);
    const bool ok =
        v.is_number_unsigned()
            ? v.get<std::uint64_t>() <= static_cast<std::uint64_t>(max)
            : v.is_number_integer() && v.get<std::int64_t>() >= min && v.get<std::int64_t>() <= max;
    if (!ok) {
      bad("'" + join(path, key) + "' must be an integer in [" + std::to_string(min) + ", " +
          std::to_string(max) + "], not " + shown(v));
    }
    return v.get<std::int64_t>();
  }
  int rankLike(const Json& obj, const char* key, const std::string& path) const {
    return static_cast<int>(i64(obj, key, path, -1, std::numeric_limits<int>::max()));
  }
  std::string str(const Json& obj, const char* key, const std::string& path) const {
    const Json& v = field(obj, key, path);
    if (!v.is_string()) bad("'" + join(path, key) + "' must be a string, not " + shown(v));
    return v.get<std::string>();
  }
  bool boolean(const Json& obj, const char* key, const std::string& path) const {
    const Json& v = field(obj, key, path);
    if (!v.is_boolean()) bad("'" + join(path, key) + "' must be true or false, not " + shown(v));
    return v.get<bool>();
  }

 private:
  static std::string join(const std::string& path, const char* key) {
    return path.empty() ? std::string(key) : path + "." + key;
  }
  static std::string shown(const Json& v) { return cut(dump(v), 40); }

  int rank_;
  int reader_;
};

SummaryCall parseCall(const FieldReader& in, const Json& j, const std::string& path) {
  SummaryCall c;
  c.id = in.u64(j, "id", path);
  c.seq = in.u64(j, "seq", path);
  c.p2p = in.boolean(j, "p2p", path);
  c.collective = in.str(j, "collective", path);
  c.algorithm = in.str(j, "algorithm", path);
  c.dtype = in.str(j, "dtype", path);
  c.op = in.str(j, "op", path);
  c.count = in.u64(j, "count", path);
  c.root = in.rankLike(j, "root", path);
  c.peer = in.rankLike(j, "peer", path);
  c.state = in.str(j, "state", path);
  if (c.state != "queued" && c.state != "running" && c.state != "waiting") {
    in.bad("'" + path + ".state' must be queued, running or waiting, not '" + cut(c.state, 40) +
           "'");
  }
  c.step = static_cast<std::uint32_t>(in.u64(j, "step", path, 0xFFFFFFFFu));
  c.steps = static_cast<std::uint32_t>(in.u64(j, "steps", path, 0xFFFFFFFFu));
  c.waitPeer = in.rankLike(j, "wait_peer", path);
  c.waitWhat = in.str(j, "wait_what", path);
  c.waitBytes = in.u64(j, "wait_bytes", path);
  c.waitVia = in.str(j, "wait_via", path);
  c.sinceMs = in.i64(j, "since_ms", path, 0, std::numeric_limits<std::int64_t>::max());
  return c;
}

// ---- the diagnosis -----------------------------------------------------------------------

// What ranks must agree on for a collective: the fingerprint, and the algorithm.
using Shape = std::tuple<std::string, std::string, std::string, std::string, std::uint64_t, int>;
Shape shapeOf(const SummaryCall& c) {
  return {c.collective, c.dtype, c.op, c.algorithm, c.count, c.root};
}

std::string seconds(std::int64_t ms) {
  char text[32];
  if (ms < 10'000) {
    std::snprintf(text, sizeof(text), "%.1f s", static_cast<double>(ms) / 1000.0);
  } else {
    std::snprintf(text, sizeof(text), "%lld s", static_cast<long long>(ms / 1000));
  }
  return text;
}

std::string ranksWord(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + rankRanges(ranks);
}

std::string dataOf(const SummaryCall& c) { return c.dtype + " x " + std::to_string(c.count); }

// "allreduce#812", "send to rank 3 (tag 7)"; with its data: "send to rank 3 (tag 7, int32 x
// 100)".
std::string nameOf(const SummaryCall& c, bool data = false) {
  if (!c.p2p) return c.collective + "#" + std::to_string(c.seq);
  const std::string tag =
      " (tag " + std::to_string(c.seq) + (data ? ", " + dataOf(c) : std::string()) + ")";
  const std::string peer = "rank " + std::to_string(c.peer);
  if (c.collective == "send") return "send to " + peer + tag;
  if (c.collective == "recv") return "recv from " + peer + tag;
  return c.collective + " with " + peer + tag;
}

// ", step 4/14, waiting for rank 5 (tcp 10.0.0.5:4321)", ", queued", "".
std::string progressOf(const SummaryCall& c, bool via) {
  if (c.state == "queued") return ", queued behind its earlier calls";
  if (c.state != "waiting" || c.waitPeer < 0) return "";
  std::string out;
  if (c.steps > 0) out += ", step " + std::to_string(c.step + 1) + "/" + std::to_string(c.steps);
  out += ", waiting for rank " + std::to_string(c.waitPeer);
  if (via && !c.waitVia.empty()) out += " (" + c.waitVia + ")";
  return out;
}

std::string lastOf(const Summary& s) {
  if (!s.lastSeq) return "no collective completed yet";
  return "last completed " + s.lastCollective + "#" + std::to_string(*s.lastSeq);
}

// What a rank that is not in the job's call does meanwhile: "; now in send to rank 3 (tag 7)
// since 2.0 s, waiting for rank 3", or ", outside collx for 61 s".
std::string meanwhile(const Summary& s, const char* outsideNote) {
  if (!s.calls.empty()) {
    const SummaryCall& c = s.calls.front();
    return "; now in " + nameOf(c) + " since " + seconds(c.sinceMs) + progressOf(c, false);
  }
  std::string out = ", outside collx";
  if (s.idleMs >= 0) out += " for " + seconds(s.idleMs);
  return out + outsideNote;
}

// "float32 x 100, op max" against "float32 x 300, op sum": the arguments that differ.
std::pair<std::string, std::string> difference(const SummaryCall& mine, const SummaryCall& job) {
  std::vector<std::string> a, b;
  if (mine.dtype != job.dtype || mine.count != job.count) {
    a.push_back(dataOf(mine));
    b.push_back(dataOf(job));
  }
  if (mine.root != job.root) {
    a.push_back("root " + std::to_string(mine.root));
    b.push_back("root " + std::to_string(job.root));
  }
  if (mine.op != job.op) {
    a.push_back("op " + mine.op);
    b.push_back("op " + job.op);
  }
  if (mine.algorithm != job.algorithm) {
    a.push_back("algorithm " + mine.algorithm);
    b.push_back("algorithm " + job.algorithm);
  }
  auto joined = [](const std::vector<std::string>& parts) {
    std::string out;
    for (const std::string& p : parts) out += (out.empty() ? "" : ", ") + p;
    return out;
  };
  return {joined(a), joined(b)};
}

// A rank that published nothing: what its join record and the probe tell of its process.
std::string notResponding(const PeerInfo* peer, const Probe& probe, Cause& cause) {
  cause = Cause::kNotResponding;
  if (peer == nullptr || peer->pid <= 0) return "not responding (no join record)";
  const std::string who = "pid " + std::to_string(peer->pid) + " on host " + peer->hostname;
  switch (probe ? probe(*peer) : ProcessState::kOtherHost) {
    case ProcessState::kRunning:
      return "not responding: " + who + " is running, but its collx watcher did not answer";
    case ProcessState::kStopped:
      cause = Cause::kStopped;
      return "not responding: " + who + " is stopped (SIGSTOP or a debugger)";
    case ProcessState::kZombie:
      cause = Cause::kDead;
      return "not responding: " + who + " is dead (zombie)";
    case ProcessState::kGone:
      cause = Cause::kDead;
      return "not responding: " + who + " is dead";
    case ProcessState::kOtherHost:
      break;
  }
  return "not responding: " + who + " (dead, stopped, or stuck outside collx)";
}

const SummaryCall* collectiveIn(const Summary& s, std::uint64_t seq) {
  for (const SummaryCall& c : s.calls) {
    if (!c.p2p && c.seq == seq) return &c;
  }
  return nullptr;
}

// A point-to-point call whose peer answered with send/recvs toward this rank under other tags
// only: the waiter's line says so, a mismatch.
void checkPartner(const SummaryCall& c, int rank, const Summaries& summaries, RankDiagnosis& rd) {
  if (c.peer < 0 || c.peer >= static_cast<int>(summaries.size()) || !summaries[c.peer]) return;
  std::vector<std::uint64_t> tags;
  for (const SummaryCall& theirs : summaries[c.peer]->calls) {
    if (!theirs.p2p || theirs.peer != rank) continue;
    if (theirs.seq == c.seq) return;  // matched: it waits on the transport
    tags.push_back(theirs.seq);
  }
  if (tags.empty()) return;
  rd.cause = Cause::kMismatch;
  rd.text += ": rank " + std::to_string(c.peer) + "'s send/recv with rank " + std::to_string(rank) +
             " has tag " + std::to_string(tags.front()) + " (mismatch)";
}

// The first responding rank with a point-to-point call in flight toward `rank`, and that call.
std::pair<int, const SummaryCall*> awaiting(int rank, const Summaries& summaries) {
  for (std::size_t other = 0; other < summaries.size(); ++other) {
    if (!summaries[other] || static_cast<int>(other) == rank) continue;
    for (const SummaryCall& c : summaries[other]->calls) {
      if (c.p2p && c.peer == rank) return {static_cast<int>(other), &c};
    }
  }
  return {-1, nullptr};
}

// The job's call: the collective sequence number most answering ranks have in flight (the
// lowest on a tie), with the arguments most of them called it with (on a tie, the lowest
// rank's); `callMs`: how long the longest of them has been in it.
std::optional<SummaryCall> jobCall(const Summaries& summaries, std::int64_t& callMs) {
  std::map<std::uint64_t, int> ranksIn;
  for (const auto& s : summaries) {
    if (!s) continue;
    std::set<std::uint64_t> seqs;
    for (const SummaryCall& c : s->calls) {
      if (!c.p2p) seqs.insert(c.seq);
    }
    for (std::uint64_t seq : seqs) ranksIn[seq]++;
  }
  std::optional<std::uint64_t> seq;
  int most = 0;
  for (const auto& [candidate, n] : ranksIn) {
    if (n > most) {
      seq = candidate;
      most = n;
    }
  }
  if (!seq) return std::nullopt;
  std::map<Shape, int> shapes;
  for (const auto& s : summaries) {
    if (!s) continue;
    if (const SummaryCall* c = collectiveIn(*s, *seq)) {
      shapes[shapeOf(*c)]++;
      callMs = std::max(callMs, c->sinceMs);
    }
  }
  const SummaryCall* job = nullptr;
  most = 0;
  for (const auto& s : summaries) {  // in rank order, so that ties go to the lowest rank
    if (!s) continue;
    const SummaryCall* c = collectiveIn(*s, *seq);
    if (c != nullptr && shapes[shapeOf(*c)] > most) {
      most = shapes[shapeOf(*c)];
      job = c;
    }
  }
  if (job == nullptr) return std::nullopt;
  return *job;
}

// A rank that answered: its cause and line, against the job's call (none: no collective is in
// flight anywhere).
void explain(const Summary& s, const std::optional<SummaryCall>& job, const Summaries& summaries,
             RankDiagnosis& rd) {
  const int r = rd.rank;
  if (!s.failed.empty()) {
    rd.cause = Cause::kFailed;
    rd.text = "failed: " + s.failed;
    return;
  }
  if (!job) {
    // Point-to-point calls, or nothing at all.
    if (!s.calls.empty()) {
      const SummaryCall& c = s.calls.front();
      rd.cause = Cause::kWaiting;
      rd.text = "in " + nameOf(c, true) + " since " + seconds(c.sinceMs) + progressOf(c, true);
      if (c.p2p) checkPartner(c, r, summaries, rd);
    } else if (const auto [waiter, c] = awaiting(r, summaries); c != nullptr) {
      rd.cause = Cause::kNotCalled;
      rd.text = "has not called the send/recv rank " + std::to_string(waiter) + " waits for (tag " +
                std::to_string(c->seq) + "): " + lastOf(s) + meanwhile(s, "");
    } else {
      rd.cause = Cause::kDone;
      rd.text = lastOf(s) + meanwhile(s, "");
    }
    return;
  }
  if (const SummaryCall* mine = collectiveIn(s, job->seq)) {
    rd.cause = Cause::kMismatch;
    if (shapeOf(*mine) == shapeOf(*job)) {
      rd.cause = Cause::kWaiting;
      rd.text = "in " + nameOf(*mine) + progressOf(*mine, true);
      if (mine->state == "running") rd.text += ", running";
    } else if (mine->collective != job->collective) {
      rd.text = lastOf(s) + "; now in " + nameOf(*mine) +
                (mine->root >= 0 ? " (root " + std::to_string(mine->root) + ")" : "") + " since " +
                seconds(mine->sinceMs) + ": it called a different collective (mismatch)";
    } else {
      auto [theirs, others] = difference(*mine, *job);
      rd.text = "called " + nameOf(*mine) + " " + theirs + " where the others have " + others +
                " (mismatch)";
    }
    return;
  }
  for (const SummaryCall& c : s.calls) {
    if (!c.p2p && c.seq < job->seq) {
      rd.cause = Cause::kBehind;
      rd.text = "still in " + nameOf(c) + " since " + seconds(c.sinceMs) + progressOf(c, false);
      return;
    }
  }
  if (s.nextSeq <= job->seq) {
    rd.cause = Cause::kNotCalled;
    rd.text = "has not called " + nameOf(*job) + ": " + lastOf(s) +
              meanwhile(s, " (skipped the call, or busy in user code)");
  } else {
    rd.cause = Cause::kDone;
    rd.text = "completed #" + std::to_string(job->seq) + meanwhile(s, "");
  }
}

// The lines under the header: equal texts merged into rank ranges; the ranks waiting in the
// job's call as the job expects share one line (each waits for its own peer at its own step:
// the line says which).
std::string lines(const Diagnosis& d) {
  std::vector<int> waiting;
  std::set<std::uint32_t> steps, counts;
  std::set<int> awaited;
  std::set<std::string> vias;
  for (const RankDiagnosis& rd : d.ranks) {
    if (rd.cause != Cause::kWaiting || !d.call || !rd.summary) continue;
    const SummaryCall* c = collectiveIn(*rd.summary, d.call->seq);
    if (c == nullptr || c->state != "waiting" || c->waitPeer < 0) continue;
    waiting.push_back(rd.rank);
    steps.insert(c->step + 1);
    counts.insert(c->steps);
    awaited.insert(c->waitPeer);
    vias.insert(c->waitVia);
  }
  std::string waitingLine;
  if (!waiting.empty()) {
    waitingLine = "in " + nameOf(*d.call);
    if (*counts.rbegin() > 0) {
      waitingLine += steps.size() == 1 ? ", step " + std::to_string(*steps.begin())
                                       : ", steps " + std::to_string(*steps.begin()) + "-" +
                                             std::to_string(*steps.rbegin());
      waitingLine += "/" + std::to_string(*counts.rbegin());
    }
    waitingLine += ", waiting for " + ranksWord({awaited.begin(), awaited.end()});
    if (awaited.size() == 1 && vias.size() == 1 && !vias.begin()->empty()) {
      waitingLine += " (" + *vias.begin() + ")";
    }
  }
  std::vector<std::pair<std::string, std::vector<int>>> merged;
  std::size_t w = 0;
  for (const RankDiagnosis& rd : d.ranks) {
    const bool inWaiting = w < waiting.size() && waiting[w] == rd.rank;
    const std::string& text = inWaiting ? waitingLine : rd.text;
    if (inWaiting) ++w;
    auto it = std::find_if(merged.begin(), merged.end(),
                           [&](const auto& line) { return line.first == text; });
    if (it == merged.end()) {
      merged.push_back({text, {rd.rank}});
    } else {
      it->second.push_back(rd.rank);
    }
  }
  std::string out;
  if (!d.info.storeProblem.empty()) {
    std::vector<int> answered;
    for (const RankDiagnosis& rd : d.ranks) {
      if (rd.summary) answered.push_back(rd.rank);
    }
    out += "\n  " + d.info.storeProblem;
    if (!answered.empty()) out += ": this is the view of " + ranksWord(answered);
  }
  for (const auto& [text, ranks] : merged) out += "\n  " + ranksWord(ranks) + ": " + text;
  return out;
}

}  // namespace

// ---- public functions --------------------------------------------------------------------

Summary summarize(const std::vector<CallRecord>& records, std::int64_t nowNs,
                  const SummaryInput& input) {
  Summary s;
  s.rank = input.rank;
  s.round = cut(input.round, kMaxRoundBytes);
  s.nextSeq = input.nextSeq;
  s.failed = cut(firstLine(input.failure), kMaxFailedBytes);
  std::optional<std::int64_t> lastEndNs;
  const CallRecord* last = nullptr;
  for (const CallRecord& r : records) {
    const bool collective = r.space == transport::Space::kCollective;
    switch (r.state) {
      case CallState::kQueued:
      case CallState::kRunning:
        s.inFlight++;
        if (s.calls.size() < kMaxSummaryCalls) s.calls.push_back(callOf(r, nowNs, input));
        break;
      case CallState::kCompleted:
      case CallState::kFailed: {
        const std::int64_t endNs = r.admittedNs + std::int64_t{r.endedUs} * 1000;
        lastEndNs = std::max(lastEndNs.value_or(endNs), endNs);
        if (r.state == CallState::kCompleted && collective && (!last || r.seq > last->seq)) {
          last = &r;
        }
        break;
      }
      case CallState::kFree:
        continue;
    }
    if (collective) s.nextSeq = std::max(s.nextSeq, r.seq + 1);
  }
  if (last != nullptr) {
    s.lastSeq = last->seq;
    s.lastCollective =
        algorithms::collectiveName(static_cast<algorithms::Collective>(last->fingerprint.coll));
  }
  if (s.inFlight == 0 && lastEndNs) s.idleMs = msBetween(*lastEndNs, nowNs);
  return s;
}

std::string summaryJson(const Summary& summary) {
  Summary s = summary;
  s.round = cut(s.round, kMaxRoundBytes);
  // The failure as written, escapes included (control characters take six bytes each).
  while (dump(Json(s.failed)).size() > kMaxFailedBytes + 2) s.failed.resize(s.failed.size() / 2);
  std::string out = dump(toJson(s));
  while (out.size() > kMaxSummaryBytes && !s.calls.empty()) {
    s.calls.pop_back();
    out = dump(toJson(s));
  }
  return out;
}

Summary parseSummary(std::string_view json, int rank, int reader) {
  FieldReader in(rank, reader);
  if (json.size() > kMaxSummaryBytes) {
    in.bad(std::to_string(json.size()) + " bytes, more than a summary's " +
           std::to_string(kMaxSummaryBytes));
  }
  Json doc;
  try {
    doc = Json::parse(json);
  } catch (const Json::parse_error& e) {
    in.bad("not JSON: " + jsonErrorText(e.what()));
  }
  Summary s;
  s.rank = in.rankLike(doc, "rank", "");
  if (s.rank != rank) in.bad("it is rank " + std::to_string(s.rank) + "'s");
  s.round = in.str(doc, "round", "");
  s.nextSeq = in.u64(doc, "next_seq", "");
  s.idleMs = in.i64(doc, "idle_ms", "", -1, std::numeric_limits<std::int64_t>::max());
  const Json& last = in.field(doc, "last", "");
  if (!last.is_null()) {
    s.lastSeq = in.u64(last, "seq", "last");
    s.lastCollective = in.str(last, "collective", "last");
  }
  s.inFlight = static_cast<std::uint32_t>(in.u64(doc, "in_flight", "", 0xFFFFFFFFu));
  const Json& calls = in.field(doc, "calls", "");
  if (!calls.is_array() || calls.size() > kMaxSummaryCalls) {
    in.bad("'calls' must be an array of at most " + std::to_string(kMaxSummaryCalls) + " calls");
  }
  for (std::size_t i = 0; i < calls.size(); ++i) {
    s.calls.push_back(parseCall(in, calls[i], "calls[" + std::to_string(i) + "]"));
  }
  s.failed = in.str(doc, "failed", "");
  return s;
}

const char* causeName(Cause cause) noexcept {
  switch (cause) {
    case Cause::kWaiting:
      return "waiting";
    case Cause::kMismatch:
      return "mismatch";
    case Cause::kNotCalled:
      return "not_called";
    case Cause::kBehind:
      return "behind";
    case Cause::kDone:
      return "done";
    case Cause::kFailed:
      return "failed";
    case Cause::kNotResponding:
      return "not_responding";
    case Cause::kStopped:
      return "stopped";
    case Cause::kDead:
      return "dead";
  }
  return "unknown";
}

Diagnosis diagnose(const Summaries& summaries, const std::vector<PeerInfo>& peers,
                   const Probe& probe, const ReportInfo& info) {
  Diagnosis d;
  d.info = info;
  d.size = static_cast<int>(summaries.size());
  d.call = jobCall(summaries, d.callMs);
  std::string job = "job " + info.job;
  if (info.generation != 0) job += " gen " + std::to_string(info.generation);
  d.header = "collx hang report, " + job + ", " + std::to_string(d.size) +
             (d.size == 1 ? " rank, " : " ranks, ");
  if (d.call) {
    const SummaryCall& c = *d.call;
    std::string args = c.algorithm;
    if (c.collective != "barrier") args += (args.empty() ? "" : ", ") + dataOf(c);
    if (c.root >= 0) args += ", root " + std::to_string(c.root);
    d.header += seconds(d.callMs) + " into " + nameOf(c) + " (" + args + "):";
  } else {
    d.header += "no collective in flight:";
  }
  for (int r = 0; r < d.size; ++r) {
    RankDiagnosis rd;
    rd.rank = r;
    const PeerInfo* peer = r < static_cast<int>(peers.size()) ? &peers[r] : nullptr;
    if (peer != nullptr) {
      rd.host = peer->hostname;
      rd.pid = peer->pid;
    }
    if (summaries[r]) {
      rd.summary = summaries[r];
      explain(*summaries[r], d.call, summaries, rd);
    } else {
      rd.text = notResponding(peer, probe, rd.cause);
      // Without the store, silence says nothing of the rank: only what the probe saw does.
      if (!d.info.storeProblem.empty() && rd.cause == Cause::kNotResponding) {
        rd.text = "unknown (the store did not answer)";
        if (peer != nullptr && peer->pid > 0) {
          rd.text += ": pid " + std::to_string(peer->pid) + " on host " + peer->hostname;
        }
      }
    }
    d.ranks.push_back(std::move(rd));
  }
  d.text = d.header + lines(d);
  return d;
}

std::string reportJson(const Diagnosis& d) {
  Json call = nullptr;
  if (d.call) {
    call = Json{{"seq", d.call->seq},
                {"collective", d.call->collective},
                {"algorithm", d.call->algorithm},
                {"dtype", d.call->dtype},
                {"count", d.call->count},
                {"root", d.call->root},
                {"since_ms", d.callMs}};
  }
  Json ranks = Json::array();
  for (const RankDiagnosis& rd : d.ranks) {
    ranks.push_back(Json{{"rank", rd.rank},
                         {"host", rd.host},
                         {"pid", rd.pid},
                         {"cause", causeName(rd.cause)},
                         {"text", rd.text},
                         {"summary", rd.summary ? toJson(*rd.summary) : Json(nullptr)}});
  }
  const std::time_t seconds = std::chrono::system_clock::to_time_t(d.info.time);
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(d.info.time.time_since_epoch()) % 1000;
  std::tm utc{};
  ::gmtime_r(&seconds, &utc);
  char time[48];
  std::snprintf(time, sizeof(time), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", utc.tm_year + 1900,
                utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec,
                static_cast<int>((ms.count() + 1000) % 1000));
  Json doc{{"job", d.info.job},     {"generation", d.info.generation},
           {"round", d.info.round}, {"trigger", d.info.trigger},
           {"time", time},          {"size", d.size},
           {"call", call},          {"store_problem", d.info.storeProblem},
           {"ranks", ranks},        {"text", d.text}};
  return dump(doc, 2) + "\n";
}

std::string reportFileName(const Diagnosis& d) {
  return "collx-hang-" + fileNamePart(d.info.job) + "-g" + std::to_string(d.info.generation) + "-" +
         fileNamePart(d.info.round.empty() ? "report" : d.info.round) + ".json";
}

std::string writeReport(const std::string& dir, const Diagnosis& d) {
  const Where where{-1, "hang report", -1};
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::string path = dir + "/" + reportFileName(d);
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << reportJson(d);
    out.flush();
    if (!out) {
      std::filesystem::remove(tmp, ec);
      throw IoError(where, "cannot write the report " + tmp);
    }
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    const std::string why = ec.message();
    std::filesystem::remove(tmp, ec);
    throw IoError(where, "cannot rename " + tmp + " to " + path + ": " + why);
  }
  return path;
}

}  // namespace collx::detail
