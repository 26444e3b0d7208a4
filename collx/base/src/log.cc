#include "collx/base/log.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <array>
#include <atomic>
#include <memory>
#include <mutex>

#include "collx/base/error.h"
#include "collx/base/setting.h"

namespace collx::log {

namespace {

constexpr int kLoggerCount = static_cast<int>(Logger::kCount);
constexpr const char* kLoggerNames[kLoggerCount] = {
    "collx", "collx.rdzv", "collx.tcp", "collx.shm", "collx.ibverbs", "collx.algo", "collx.run",
};
constexpr const char* kLevelNames[] = {"trace", "debug", "info", "warn", "error", "off"};

const Setting<kind::String> kLogLevel(
    {.name = "COLLX_LOG_LEVEL",
     .component = "log",
     .defaultValue = "warn",
     .help = "Log levels: a default and per-logger overrides, e.g. 'info,collx.rdzv=debug'. "
             "Levels: trace debug info warn error off. Loggers: collx collx.rdzv collx.tcp "
             "collx.shm collx.ibverbs collx.algo collx.run."});

std::atomic<int> gProcessRank{-1};
thread_local int tThreadRank = -1;

// "%R": the thread's rank if it has one, else the process's.
class RankFlag : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg&, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    int rank = tThreadRank >= 0 ? tThreadRank : gProcessRank.load(std::memory_order_relaxed);
    std::string text = rank >= 0 ? "rank " + std::to_string(rank) : "rank ?";
    dest.append(text.data(), text.data() + text.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<RankFlag>();
  }
};

spdlog::level::level_enum toSpdlog(Level level) {
  switch (level) {
    case Level::kTrace:
      return spdlog::level::trace;
    case Level::kDebug:
      return spdlog::level::debug;
    case Level::kInfo:
      return spdlog::level::info;
    case Level::kWarn:
      return spdlog::level::warn;
    case Level::kError:
      return spdlog::level::err;
    case Level::kOff:
      return spdlog::level::off;
  }
  return spdlog::level::off;
}

std::optional<Level> parseLevel(std::string_view text) {
  for (int i = 0; i <= static_cast<int>(Level::kOff); ++i) {
    if (text == kLevelNames[i]) return static_cast<Level>(i);
  }
  if (text == "warning") return Level::kWarn;
  if (text == "err") return Level::kError;
  return std::nullopt;
}

// Loggers are created on first use, never registered with spdlog's registry, so an
// application's own spdlog configuration does not change collx's and vice versa.
class State {
 public:
  State() {
    for (auto& level : levels_) level.store(static_cast<int>(Level::kWarn));
    auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
    auto formatter = std::make_unique<spdlog::pattern_formatter>();
    formatter->add_flag<RankFlag>('R').set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%R] [%n] [%l] %v");
    sink->set_formatter(std::move(formatter));
    for (int i = 0; i < kLoggerCount; ++i) {
      loggers_[i] = std::make_shared<spdlog::logger>(kLoggerNames[i], sink);
      loggers_[i]->set_level(spdlog::level::trace);  // filtering happens in enabled()
    }
    try {
      apply(kLogLevel.get(Config::process()), kLogLevel.name());
    } catch (const Error& e) {
      write(Logger::kCore, Level::kWarn,
            std::string(e.what()) + "; using '" + kLogLevel.defaultValue() + "'");
      apply(kLogLevel.defaultValue(), kLogLevel.name());
    }
  }

  bool enabledAt(Logger logger, Level level) const noexcept {
    return static_cast<int>(level) >=
           levels_[static_cast<int>(logger)].load(std::memory_order_relaxed);
  }

  void write(Logger logger, Level level, std::string_view message) noexcept {
    try {
      loggers_[static_cast<int>(logger)]->log(toSpdlog(level), message);
    } catch (...) {
      // Logging must never take a collective down.
    }
  }

  void apply(std::string_view spec, std::string_view source) {
    std::array<int, kLoggerCount> parsed;
    parsed.fill(static_cast<int>(Level::kWarn));
    std::array<bool, kLoggerCount> explicitLevel{};
    std::string_view rest = spec;
    while (!rest.empty()) {
      std::size_t comma = rest.find(',');
      std::string_view item = rest.substr(0, comma);
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
      if (item.empty()) continue;
      std::size_t eq = item.find('=');
      std::string_view name = eq == std::string_view::npos ? "" : item.substr(0, eq);
      std::string_view levelText = eq == std::string_view::npos ? item : item.substr(eq + 1);
      std::optional<Level> level = parseLevel(levelText);
      if (!level) {
        throw InvalidArgument(Where{-1, "config", -1},
                              std::string(source) + "='" + std::string(spec) +
                                  "': unknown level '" + std::string(levelText) +
                                  "' (expected trace, debug, info, warn, error or off)");
      }
      if (name.empty()) {
        for (int i = 0; i < kLoggerCount; ++i) {
          if (!explicitLevel[i]) parsed[i] = static_cast<int>(*level);
        }
        continue;
      }
      int index = -1;
      for (int i = 0; i < kLoggerCount; ++i) {
        if (name == kLoggerNames[i]) index = i;
      }
      if (index < 0) {
        throw InvalidArgument(Where{-1, "config", -1},
                              std::string(source) + "='" + std::string(spec) +
                                  "': unknown logger '" + std::string(name) +
                                  "' (expected collx, collx.rdzv, collx.tcp, collx.shm, "
                                  "collx.ibverbs, collx.algo or collx.run)");
      }
      parsed[index] = static_cast<int>(*level);
      explicitLevel[index] = true;
    }
    for (int i = 0; i < kLoggerCount; ++i) levels_[i].store(parsed[i]);
  }

 private:
  std::array<std::atomic<int>, kLoggerCount> levels_;
  std::array<std::shared_ptr<spdlog::logger>, kLoggerCount> loggers_;
};

State& state() {
  static State instance;
  return instance;
}

}  // namespace

const char* loggerName(Logger logger) noexcept { return kLoggerNames[static_cast<int>(logger)]; }

bool enabled(Logger logger, Level level) noexcept { return state().enabledAt(logger, level); }

void write(Logger logger, Level level, std::string_view message) noexcept {
  state().write(logger, level, message);
}

void configure(std::string_view spec, std::string_view source) { state().apply(spec, source); }

void setProcessRank(int rank) noexcept { gProcessRank.store(rank, std::memory_order_relaxed); }

ScopedLogRank::ScopedLogRank(int rank) noexcept : previous_(tThreadRank) { tThreadRank = rank; }
ScopedLogRank::~ScopedLogRank() { tThreadRank = previous_; }

}  // namespace collx::log
