// The hang report's pure parts (internal): a rank's compact summary of its flight
// recorder, its JSON form (what each rank publishes in the store), and the diagnosis that
// joins every rank's summary into one report naming the rank that is the cause.
//
// Nothing here does I/O except writeReport(); the watcher (hang_report.cc) gathers the
// inputs. Durations only: the ranks' clocks are never compared.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "collx/algorithms/recorder.h"
#include "collx/context.h"
#include "process_probe.h"

namespace collx::detail {

// A call in flight, as a summary carries it.
struct SummaryCall {
  std::uint64_t id = 0;
  std::uint64_t seq = 0;  // collectives: the sequence number; point to point: the tag
  bool p2p = false;
  std::string collective;  // "allreduce", ...; point to point: "send", "recv" or "send/recv"
  std::string algorithm;   // "" for point to point
  std::string dtype;       // "float32"
  std::string op;          // "sum"; "" where the collective reduces nothing
  std::uint64_t count = 0;
  int root = -1;
  int peer = -1;           // point to point: the peer
  std::string state;       // "queued", "running" or "waiting"
  std::uint32_t step = 0;  // waiting: the step (from 0) of `steps`
  std::uint32_t steps = 0;
  int waitPeer = -1;     // waiting: the rank it waits for
  std::string waitWhat;  // waiting: "send", "recv" or "shm"
  std::uint64_t waitBytes = 0;
  std::string waitVia;       // waiting: how it reaches that rank ("tcp 10.0.0.5:4321"); may be ""
  std::int64_t sinceMs = 0;  // since it was admitted
};

// What a rank tells the others in a round: compact (its JSON is at most kMaxSummaryBytes).
struct Summary {
  int rank = -1;
  std::string round;
  std::uint64_t nextSeq = 0;             // the sequence number of its next collective
  std::int64_t idleMs = -1;              // nothing in flight: since its last call ended; else -1
  std::optional<std::uint64_t> lastSeq;  // its last completed collective, if any
  std::string lastCollective;
  std::uint32_t inFlight = 0;      // calls in flight (calls lists the oldest kMaxSummaryCalls)
  std::vector<SummaryCall> calls;  // oldest first
  std::string failed;              // the first line of its context's failure; "" if none
};

inline constexpr std::size_t kMaxSummaryBytes = 2048;
inline constexpr std::size_t kMaxSummaryCalls = 4;

// What a summary needs beyond the recorder's records.
struct SummaryInput {
  int rank = -1;
  std::string round;
  // The context's next collective sequence number; the records raise it if they hold a
  // later one (a call admitted between reading the counter and the recorder).
  std::uint64_t nextSeq = 0;
  std::string failure;  // the context's failure (its first line is kept); "" if none
  // How this rank reaches a peer ("tcp 10.0.0.5:4321", "shm pid 1234"); empty: not said.
  std::function<std::string(int peer)> describePeer;
};

// The summary of a recorder's records (Recorder::snapshot(), oldest first) at steady-clock
// time `nowNs`.
Summary summarize(const std::vector<algorithms::CallRecord>& records, std::int64_t nowNs,
                  const SummaryInput& input);

// Compact JSON, at most kMaxSummaryBytes (long texts are cut, then calls dropped from the end).
std::string summaryJson(const Summary& summary);
// Parses what rank `rank` published, for rank `reader` (named in errors). It comes from
// another process: anything malformed (not JSON, a field missing or of the wrong type, too
// long, another rank's) throws IoError naming that rank and what is wrong.
Summary parseSummary(std::string_view json, int rank, int reader = -1);

// Why a rank is where it is, one per rank.
enum class Cause : std::uint8_t {
  kWaiting,        // in the job's call, with the others' arguments, waiting
  kMismatch,       // in the job's call's sequence number, with another collective or arguments
  kNotCalled,      // has not reached the job's call, nothing earlier in flight
  kBehind,         // still in an earlier collective
  kDone,           // past the job's call
  kFailed,         // its context failed
  kNotResponding,  // published nothing (alive as far as can be told, or on another host)
  kStopped,        // published nothing; its process is stopped (SIGSTOP, a debugger)
  kDead,           // published nothing; its process is gone or a zombie
};
// "waiting", "mismatch", "not_called", "behind", "done", "failed", "not_responding",
// "stopped", "dead".
const char* causeName(Cause cause) noexcept;

// What the report is about, beyond the ranks' summaries.
struct ReportInfo {
  std::string job;
  std::int64_t generation = 0;
  std::string round;    // the round's name ("c812.a", "u1", ...)
  std::string trigger;  // "after", "timeout", "signal" or "dump"
  std::chrono::system_clock::time_point time;
  // Set when the store did not answer ("the store (tcp://...) did not answer within 1000 ms"):
  // the report is then the view of the ranks whose summaries are given (the reporter's).
  std::string storeProblem;
};

struct RankDiagnosis {
  int rank = -1;
  Cause cause = Cause::kNotResponding;
  std::string text;  // without the "rank R: " prefix
  std::string host;  // from its join record ("" when there is none)
  std::int64_t pid = 0;
  std::optional<Summary> summary;  // what it published
};

struct Diagnosis {
  ReportInfo info;
  int size = 0;
  // The job's call: the collective sequence number most responding ranks are in (the lowest
  // on a tie), and the arguments most of them called it with.
  std::optional<SummaryCall> call;
  std::int64_t callMs = 0;           // how long the longest of them has been in it
  std::string header;                // "collx hang report, job 7f3a, 8 ranks, 61 s into ...:"
  std::vector<RankDiagnosis> ranks;  // by rank
  // The header, then one line per cause with equal lines merged into rank ranges:
  // "  ranks 0-4,6,7: in allreduce#812, step 4/14, waiting for rank 5".
  std::string text;
};

// Joins the ranks' summaries (nullopt: the rank did not answer) with their join records
// (`peers`, by rank; may be shorter) into one report. `probe` is asked about each rank that
// did not answer. Pure: no I/O but what `probe` does.
Diagnosis diagnose(const std::vector<std::optional<Summary>>& summaries,
                   const std::vector<PeerInfo>& peers, const Probe& probe,
                   const ReportInfo& info = {});

// The report as a JSON document: job, generation, round, trigger, time (ISO 8601, UTC), size,
// call {seq, collective, algorithm, dtype, count, root} or null, ranks [{rank, host, pid,
// cause, text, summary}], text.
std::string reportJson(const Diagnosis& diagnosis);
// "collx-hang-<job>-g<generation>-<round>.json" (characters unsafe in a file name become '_').
std::string reportFileName(const Diagnosis& diagnosis);
// Writes reportJson() into `dir` under reportFileName() (a temporary file renamed into
// place: readers never see half a report) and returns its path. Throws IoError.
std::string writeReport(const std::string& dir, const Diagnosis& diagnosis);

using collx::rankRanges;

}  // namespace collx::detail
