// Logging for collx's own code (internal: not installed, keeps spdlog out of every header).
//
// Loggers: collx, collx.rdzv, collx.tcp, collx.shm, collx.ibverbs, collx.algo, collx.run.
// COLLX_LOG_LEVEL="info,collx.rdzv=debug" sets the default and per-logger levels
// (default warn). Every line carries the rank: the thread's (ScopedLogRank) or the process's.
// A disabled level costs one relaxed atomic load; nothing above debug belongs on a hot path.
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>

namespace collx::log {

enum class Level : int { kTrace = 0, kDebug, kInfo, kWarn, kError, kOff };
enum class Logger : int { kCore = 0, kRdzv, kTcp, kShm, kIbverbs, kAlgo, kRun, kCount };

const char* loggerName(Logger logger) noexcept;
bool enabled(Logger logger, Level level) noexcept;
void write(Logger logger, Level level, std::string_view message) noexcept;

// Applies a COLLX_LOG_LEVEL-style spec; throws InvalidArgument naming `source` when malformed.
void configure(std::string_view spec, std::string_view source = "COLLX_LOG_LEVEL");
// The rank printed on lines of threads without a ScopedLogRank (-1: none yet).
void setProcessRank(int rank) noexcept;

// While alive, this thread's lines carry `rank` (many ranks as threads in one process).
class ScopedLogRank {
 public:
  explicit ScopedLogRank(int rank) noexcept;
  ~ScopedLogRank();
  ScopedLogRank(const ScopedLogRank&) = delete;
  ScopedLogRank& operator=(const ScopedLogRank&) = delete;

 private:
  int previous_;
};

}  // namespace collx::log

#define COLLX_LOG(logger, level, ...)                                                    \
  do {                                                                                   \
    if (::collx::log::enabled(::collx::log::Logger::logger, ::collx::log::Level::level)) \
      ::collx::log::write(::collx::log::Logger::logger, ::collx::log::Level::level,      \
                          ::fmt::format(__VA_ARGS__));                                   \
  } while (0)

#define COLLX_TRACE(logger, ...) COLLX_LOG(logger, kTrace, __VA_ARGS__)
#define COLLX_DEBUG(logger, ...) COLLX_LOG(logger, kDebug, __VA_ARGS__)
#define COLLX_INFO(logger, ...) COLLX_LOG(logger, kInfo, __VA_ARGS__)
#define COLLX_WARN(logger, ...) COLLX_LOG(logger, kWarn, __VA_ARGS__)
#define COLLX_ERROR(logger, ...) COLLX_LOG(logger, kError, __VA_ARGS__)
