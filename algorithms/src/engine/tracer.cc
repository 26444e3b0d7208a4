#include "collx/algorithms/tracer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "collx/base/data_type.h"
#include "collx/base/error.h"
#include "collx/base/file_name.h"
#include "collx/base/log.h"
#include "collx/base/units.h"

namespace collx::algorithms {

namespace {

// Text formatted before it is written: the longest line is far shorter than the margin.
constexpr std::size_t kTextBytes = 64 * kKiB;
constexpr std::size_t kLineMargin = 2048;
// Threads of the file (tid): the async spans' (calls, transfers) and the two whose spans
// never overlap on them.
constexpr int kComputeThread = 1;
constexpr int kSharedThread = 2;

}  // namespace

std::string Tracer::pathFor(const std::string& dir, const Identity& identity) {
  return (std::filesystem::path(dir) /
          ("collx-trace-" + fileNamePart(identity.jobId) + "-g" +
           std::to_string(identity.generation) + "-r" + std::to_string(identity.rank) + ".json"))
      .string();
}

Tracer::Tracer(const std::string& dir, const Identity& identity, std::size_t events)
    : identity_(identity),
      path_(pathFor(dir, identity)),
      events_(std::make_unique<Event[]>(std::max<std::size_t>(events, 1))),
      capacity_(std::max<std::size_t>(events, 1)),
      text_(std::make_unique<char[]>(kTextBytes)) {
  const Where where{identity.rank, "trace (COLLX_TRACE)", -1};
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) {
    throw IoError(where, "cannot create the trace directory " + dir + ": " + error.message());
  }
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd_ < 0) {
    throw IoError(where, "cannot create the trace file " + path_ + ": " + std::strerror(errno));
  }
  const std::string name =
      nlohmann::json("rank " + std::to_string(identity.rank) + " (" + identity.host + ")").dump();
  std::lock_guard<std::mutex> lock(mutex_);
  line("[\n{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":%s}}",
       identity.rank, name.c_str());
  line(
      ",\n{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":%d,\"tid\":0,"
      "\"args\":{\"sort_index\":%d}}",
      identity.rank, identity.rank);
  line(
      ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":%d,"
      "\"args\":{\"name\":\"reduce and copy\"}}",
      identity.rank, kComputeThread);
  line(
      ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":%d,"
      "\"args\":{\"name\":\"shared memory\"}}",
      identity.rank, kSharedThread);
  writeText();
}

Tracer::~Tracer() {
  std::lock_guard<std::mutex> lock(mutex_);
  writeEvents();
  line("\n]\n");
  writeText();
  if (fd_ >= 0 && ::close(fd_) != 0) {
    COLLX_WARN(kAlgo, "rank {}: closing the trace file {}: {}", identity_.rank, path_,
               std::strerror(errno));
  }
}

void Tracer::setClock(const Clock& clock) {
  const std::string host = nlohmann::json(identity_.host).dump();
  const std::string job = nlohmann::json(identity_.jobId).dump();
  std::lock_guard<std::mutex> lock(mutex_);
  offsetNs_ = clock.offsetNs;
  char offset[32], trip[32];
  std::snprintf(offset, sizeof(offset), "%.3f", static_cast<double>(clock.offsetNs) / 1e3);
  std::snprintf(trip, sizeof(trip), "%.3f", static_cast<double>(clock.roundTripNs) / 1e3);
  line(
      ",\n{\"ph\":\"M\",\"name\":\"collx\",\"pid\":%d,\"tid\":0,\"args\":{\"rank\":%d,"
      "\"size\":%d,\"host\":%s,\"job\":%s,\"generation\":%" PRId64
      ",\"clock\":\"steady\",\"clock_reference_rank\":0,\"clock_source\":\"%s\","
      "\"clock_offset_us\":%s,\"clock_round_trip_us\":%s,\"clock_rounds\":%d}}",
      identity_.rank, identity_.rank, identity_.size, host.c_str(), job.c_str(),
      identity_.generation, clockSourceName(clock.source), offset, trip, clock.rounds);
  writeText();
}

const char* Tracer::clockSourceName(ClockSource source) noexcept {
  switch (source) {
    case ClockSource::kReference:
      return "rank 0";
    case ClockSource::kSameHost:
      return "same host as rank 0";
    case ClockSource::kMeasured:
      return "measured";
    case ClockSource::kUnaligned:
      break;
  }
  return "not aligned";
}

std::int64_t Tracer::nowNs() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

std::uint64_t Tracer::nextId() noexcept {
  // Unique across the ranks' files, so that a merged trace pairs every begin with its end.
  return (static_cast<std::uint64_t>(identity_.rank) << 40) |
         nextId_.fetch_add(1, std::memory_order_relaxed);
}

std::uint64_t Tracer::beginCall(const Call& call, std::int64_t nowNs) noexcept {
  Event e{};
  e.kind = Kind::kCallBegin;
  e.id = nextId();
  e.name = call.collective;
  e.algorithm = call.algorithm;
  e.pointToPoint = call.pointToPoint;
  e.seq = call.seq;
  e.peer = call.peer;
  e.root = call.root;
  e.dtype = call.dtype;
  e.count = call.count;
  e.bytes = call.bytes;
  e.beginNs = nowNs;
  push(e);
  return e.id;
}

Tracer::Event Tracer::span(Kind kind, std::uint64_t call, std::int64_t beginNs,
                           std::int64_t endNs) noexcept {
  Event e{};
  e.kind = kind;
  e.call = call;
  e.beginNs = beginNs;
  e.endNs = endNs;
  return e;
}

void Tracer::endCall(std::uint64_t call, const char* collective, bool failed,
                     std::int64_t nowNs) noexcept {
  Event e = span(Kind::kCallEnd, call, nowNs, nowNs);
  e.id = call;
  e.name = collective;
  e.failed = failed;
  push(e);
}

void Tracer::transfer(std::uint64_t call, bool send, int peer, std::uint32_t step,
                      std::uint64_t bytes, std::int64_t beginNs, std::int64_t endNs,
                      bool failed) noexcept {
  Event e = span(send ? Kind::kSend : Kind::kRecv, call, beginNs, endNs);
  e.id = nextId();
  e.peer = peer;
  e.step = step;
  e.bytes = bytes;
  e.failed = failed;
  push(e);
}

void Tracer::compute(std::uint64_t call, Compute kind, std::uint64_t bytes, std::int64_t beginNs,
                     std::int64_t endNs) noexcept {
  Event e = span(kind == Compute::kReduce ? Kind::kReduce
                 : kind == Compute::kCopy ? Kind::kCopy
                                          : Kind::kDivide,
                 call, beginNs, endNs);
  e.bytes = bytes;
  push(e);
}

void Tracer::shared(std::uint64_t call, const char* collective, std::uint64_t bytes,
                    std::int64_t beginNs, std::int64_t endNs) noexcept {
  Event e = span(Kind::kShared, call, beginNs, endNs);
  e.name = collective;
  e.bytes = bytes;
  push(e);
}

void Tracer::sharedWait(std::uint64_t call, int rank, std::uint64_t use, std::int64_t beginNs,
                        std::int64_t endNs) noexcept {
  Event e = span(Kind::kSharedWait, call, beginNs, endNs);
  e.peer = rank;
  e.seq = use;
  push(e);
}

void Tracer::flush() noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  writeEvents();
}

void Tracer::push(const Event& event) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  if (broken_) return;
  events_[used_++] = event;
  if (used_ == capacity_) writeEvents();
}

void Tracer::writeEvents() noexcept {
  for (std::size_t i = 0; i < used_; ++i) formatEvent(events_[i]);
  used_ = 0;
  writeText();
}

const char* Tracer::micros(std::int64_t t, char* out) noexcept {
  // 32 characters hold any int64 in microseconds with three decimals.
  const std::int64_t whole = t / 1000, frac = t % 1000;
  if (t < 0 && frac != 0) {
    std::snprintf(out, 32, "-%" PRId64 ".%03" PRId64, -whole, -frac);
  } else {
    std::snprintf(out, 32, "%" PRId64 ".%03" PRId64, whole, frac < 0 ? -frac : frac);
  }
  return out;
}

void Tracer::formatEvent(const Event& e) noexcept {
  const int pid = identity_.rank;
  char ts[32], end[32], dur[32];
  switch (e.kind) {
    case Kind::kCallBegin: {
      char extra[96] = "";
      if (e.pointToPoint) {
        std::snprintf(extra, sizeof(extra), ",\"tag\":%" PRIu64 ",\"peer\":%d", e.seq, e.peer);
      } else {
        std::snprintf(extra, sizeof(extra), ",\"seq\":%" PRIu64 ",\"algorithm\":\"%s\"", e.seq,
                      e.algorithm);
        if (e.root >= 0) {
          const std::size_t n = std::strlen(extra);
          std::snprintf(extra + n, sizeof(extra) - n, ",\"root\":%d", e.root);
        }
      }
      line(",\n{\"ph\":\"b\",\"cat\":\"call\",\"name\":\"%s\",\"id\":\"0x%" PRIx64
           "\",\"pid\":%d,\"tid\":0,\"ts\":%s,\"args\":{\"dtype\":\"%s\",\"count\":%" PRIu64
           ",\"bytes\":%" PRIu64 "%s}}",
           e.name, e.id, pid, micros(e.beginNs + offsetNs_, ts), dataTypeName(e.dtype), e.count,
           e.bytes, extra);
      break;
    }
    case Kind::kCallEnd:
      line(",\n{\"ph\":\"e\",\"cat\":\"call\",\"name\":\"%s\",\"id\":\"0x%" PRIx64
           "\",\"pid\":%d,\"tid\":0,\"ts\":%s%s}",
           e.name, e.id, pid, micros(e.beginNs + offsetNs_, ts),
           e.failed ? ",\"args\":{\"failed\":true}" : "");
      break;
    case Kind::kSend:
    case Kind::kRecv: {
      const bool send = e.kind == Kind::kSend;
      const char* cat = send ? "send" : "recv";
      const char* toward = send ? "to" : "from";
      line(",\n{\"ph\":\"b\",\"cat\":\"%s\",\"name\":\"%s %s %d\",\"id\":\"0x%" PRIx64
           "\",\"pid\":%d,\"tid\":0,\"ts\":%s,\"args\":{\"peer\":%d,\"bytes\":%" PRIu64
           ",\"step\":%u,\"call\":\"0x%" PRIx64 "\"}}",
           cat, cat, toward, e.peer, e.id, pid, micros(e.beginNs + offsetNs_, ts), e.peer, e.bytes,
           e.step, e.call);
      line(",\n{\"ph\":\"e\",\"cat\":\"%s\",\"name\":\"%s %s %d\",\"id\":\"0x%" PRIx64
           "\",\"pid\":%d,\"tid\":0,\"ts\":%s%s}",
           cat, cat, toward, e.peer, e.id, pid, micros(e.endNs + offsetNs_, end),
           e.failed ? ",\"args\":{\"failed\":true}" : "");
      break;
    }
    case Kind::kReduce:
    case Kind::kCopy:
    case Kind::kDivide: {
      const char* name = e.kind == Kind::kReduce ? "reduce"
                         : e.kind == Kind::kCopy ? "copy"
                                                 : "divide";
      line(
          ",\n{\"ph\":\"X\",\"cat\":\"compute\",\"name\":\"%s\",\"pid\":%d,\"tid\":%d,\"ts\":%s,"
          "\"dur\":%s,\"args\":{\"bytes\":%" PRIu64 ",\"call\":\"0x%" PRIx64 "\"}}",
          name, pid, kComputeThread, micros(e.beginNs + offsetNs_, ts),
          micros(e.endNs - e.beginNs, dur), e.bytes, e.call);
      break;
    }
    case Kind::kShared:
      line(
          ",\n{\"ph\":\"X\",\"cat\":\"shm\",\"name\":\"shm %s\",\"pid\":%d,\"tid\":%d,\"ts\":%s,"
          "\"dur\":%s,\"args\":{\"bytes\":%" PRIu64 ",\"call\":\"0x%" PRIx64 "\"}}",
          e.name, pid, kSharedThread, micros(e.beginNs + offsetNs_, ts),
          micros(e.endNs - e.beginNs, dur), e.bytes, e.call);
      break;
    case Kind::kSharedWait:
      line(
          ",\n{\"ph\":\"X\",\"cat\":\"wait\",\"name\":\"wait for rank %d\",\"pid\":%d,\"tid\":%d,"
          "\"ts\":%s,\"dur\":%s,\"args\":{\"rank\":%d,\"use\":%" PRIu64 ",\"call\":\"0x%" PRIx64
          "\"}}",
          e.peer, pid, kSharedThread, micros(e.beginNs + offsetNs_, ts),
          micros(e.endNs - e.beginNs, dur), e.peer, e.seq, e.call);
      break;
  }
}

void Tracer::line(const char* format, ...) noexcept {
  if (kTextBytes - textUsed_ < kLineMargin) writeText();
  va_list args;
  va_start(args, format);
  const int n = std::vsnprintf(text_.get() + textUsed_, kTextBytes - textUsed_, format, args);
  va_end(args);
  if (n > 0)
    textUsed_ += std::min<std::size_t>(static_cast<std::size_t>(n), kTextBytes - textUsed_ - 1);
}

void Tracer::writeText() noexcept {
  std::size_t done = 0;
  while (!broken_ && done < textUsed_) {
    const ssize_t n = ::write(fd_, text_.get() + done, textUsed_ - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      broken_ = true;
      COLLX_WARN(kAlgo, "rank {}: writing the trace file {} failed ({}); tracing stops",
                 identity_.rank, path_, std::strerror(errno));
      break;
    }
    done += static_cast<std::size_t>(n);
  }
  textUsed_ = 0;
}

}  // namespace collx::algorithms
