// Tracer: a context's Chrome trace event file (COLLX_TRACE; the API opens it, the engine
// feeds it), the JSON that https://ui.perfetto.dev and chrome://tracing open.
//
// One file per rank, <dir>/collx-trace-<job>-g<generation>-r<rank>.json (mode 0600), in the
// JSON Array Format, one event per line: pid is the rank ("rank 3 (host)"). In it:
//   - every call, an async span (ph b/e, cat "call", named by its collective or "send" /
//     "recv"; args seq (or tag and peer), algorithm, dtype, count, bytes, root);
//   - inside it, every send and receive from its post to its completion, an async span
//     each (cat "send" / "recv", named "send to 2" / "recv from 1": Perfetto groups them into
//     a track per peer and direction; args peer, bytes, step and the call's id);
//   - every reduction, copy and division (ph X on thread 1, "reduce and copy": only the
//     thread that drives the engine runs them, one at a time);
//   - every shared-memory algorithm's call and, inside it, each of its waits that slept
//     (ph X on thread 2, "shared memory": one such call runs at a time).
// Timestamps are the steady clock's (microseconds) plus the offset to rank 0's clock found
// at connect (setClock: none on rank 0's host, measured elsewhere), so that the ranks' files
// share one timeline.
//
// Events go into a fixed buffer (no allocation once made); the buffer is written out when it
// fills, on flush() and when the tracer goes away (the context closes), so a call does no
// I/O except the one that fills it. The array's closing bracket is written last: the file
// of a rank that crashed lacks it, which the JSON Array Format allows.
//
// Thread-safe: every method may be called from any thread (one mutex, taken per event).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "collx/base/data_type.h"

namespace collx::algorithms {

class Tracer {
 public:
  struct Identity {
    int rank = 0;
    int size = 1;
    std::string host;
    std::string jobId = "default";
    std::int64_t generation = 0;
  };
  // How this rank's clock relates to rank 0's: rank 0's clock = this rank's + offsetNs.
  enum class ClockSource : std::uint8_t {
    kReference,  // rank 0
    kSameHost,   // on rank 0's host: one steady clock, offset 0
    kMeasured,   // by ping-pong with rank 0 at connect: the sample of `rounds` with the
                 // shortest round trip
    kUnaligned,  // not every rank traces: no measurement (offset 0)
  };
  struct Clock {
    ClockSource source = ClockSource::kUnaligned;
    std::int64_t offsetNs = 0;
    std::int64_t roundTripNs = 0;
    int rounds = 0;
  };
  // "rank 0", "same host as rank 0", "measured", "not aligned".
  static const char* clockSourceName(ClockSource source) noexcept;
  enum class Compute : std::uint8_t { kReduce, kCopy, kDivide };

  static constexpr std::size_t kEvents = 8192;

  // <dir>/collx-trace-<job>-g<generation>-r<rank>.json (characters of the job id other than
  // letters, digits, '.', '_' and '-' written as '_').
  static std::string pathFor(const std::string& dir, const Identity& identity);

  // Creates `dir` when missing and the file (mode 0600; an earlier one of that name is
  // replaced), and writes its metadata. Throws IoError naming the path when it cannot.
  Tracer(const std::string& dir, const Identity& identity, std::size_t events = kEvents);
  // Writes what is buffered and the array's closing bracket.
  ~Tracer();
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  const std::string& path() const noexcept { return path_; }
  // Sets the offset added to every timestamp written from now on (before the first call)
  // and writes it into the file's metadata ("collx" event: clock_source, clock_offset_us,
  // clock_round_trip_us, clock_rounds).
  void setClock(const Clock& clock);

  // The steady clock, in nanoseconds: the timebase of every event.
  static std::int64_t nowNs() noexcept;

  // A call begins: its span opens. `seq`: a collective's sequence number, a send's or
  // receive's tag (pointToPoint, `peer` its peer); `root` -1 when it has none. Returns the
  // id its steps name.
  struct Call {
    const char* collective = "";
    const char* algorithm = "";
    bool pointToPoint = false;
    std::uint64_t seq = 0;
    int peer = -1;
    int root = -1;
    DataType dtype = DataType::kUint8;
    std::uint64_t count = 0;
    std::uint64_t bytes = 0;
  };
  std::uint64_t beginCall(const Call& call, std::int64_t nowNs) noexcept;
  void endCall(std::uint64_t call, const char* collective, bool failed,
               std::int64_t nowNs) noexcept;
  // A send (or receive) of `call`, posted at beginNs, completed (or failed) at endNs.
  void transfer(std::uint64_t call, bool send, int peer, std::uint32_t step, std::uint64_t bytes,
                std::int64_t beginNs, std::int64_t endNs, bool failed) noexcept;
  void compute(std::uint64_t call, Compute kind, std::uint64_t bytes, std::int64_t beginNs,
               std::int64_t endNs) noexcept;
  // A shared-memory algorithm's call of `call`, and one of its waits for rank `rank`'s use
  // `use` of the group buffers.
  void shared(std::uint64_t call, const char* collective, std::uint64_t bytes, std::int64_t beginNs,
              std::int64_t endNs) noexcept;
  void sharedWait(std::uint64_t call, int rank, std::uint64_t use, std::int64_t beginNs,
                  std::int64_t endNs) noexcept;

  // Writes what is buffered (the engine does when a call fails: the trace of a job that then
  // exits without closing its context still shows it).
  void flush() noexcept;

 private:
  enum class Kind : std::uint8_t {
    kCallBegin,
    kCallEnd,
    kSend,
    kRecv,
    kReduce,
    kCopy,
    kDivide,
    kShared,
    kSharedWait
  };
  struct Event {
    Kind kind;
    bool failed;
    bool pointToPoint;
    DataType dtype;
    std::int32_t peer;  // a transfer's or send's peer; a wait's rank
    std::int32_t root;
    std::uint32_t step;
    std::uint64_t id;    // the event's own (calls, transfers)
    std::uint64_t call;  // the call it belongs to (steps)
    std::uint64_t seq;   // calls: seq or tag; waits: the use
    std::uint64_t count;
    std::uint64_t bytes;
    std::int64_t beginNs;
    std::int64_t endNs;
    const char* name;       // a call's collective
    const char* algorithm;  // a call's algorithm
  };

  // An event of `call` from beginNs to endNs (the other fields zero).
  static Event span(Kind kind, std::uint64_t call, std::int64_t beginNs,
                    std::int64_t endNs) noexcept;
  void push(const Event& event) noexcept;
  std::uint64_t nextId() noexcept;
  // Under mutex_: formats the buffered events into text_ and writes them out.
  void writeEvents() noexcept;
  void formatEvent(const Event& e) noexcept;
  // Under mutex_: appends one line (printf format) to text_, writing text_ out first when
  // it might not fit.
  void line(const char* format, ...) noexcept __attribute__((format(printf, 2, 3)));
  void writeText() noexcept;
  // "123.456": nanoseconds as microseconds, into `out` (32 characters).
  static const char* micros(std::int64_t ns, char* out) noexcept;

  Identity identity_;
  std::string path_;
  int fd_ = -1;
  std::mutex mutex_;
  std::unique_ptr<Event[]> events_;
  std::size_t capacity_;
  std::size_t used_ = 0;
  std::unique_ptr<char[]> text_;
  std::size_t textUsed_ = 0;
  bool broken_ = false;  // a write failed: events are dropped
  std::int64_t offsetNs_ = 0;
  std::atomic<std::uint64_t> nextId_{1};
};

}  // namespace collx::algorithms
