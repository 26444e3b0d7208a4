#include "trace.h"

#include <limits>

#include "collx/base/setting.h"

namespace collx::detail {

namespace {

const AutoSetting<kind::String> kTrace(
    {.name = "COLLX_TRACE",
     .component = "trace",
     .automatic = "off",
     .help = "A directory (made if missing): every rank writes its calls there as a Chrome trace "
             "event file, collx-trace-<job>-g<generation>-r<rank>.json (open it in "
             "https://ui.perfetto.dev or chrome://tracing; `collx-trace merge <dir>` joins the "
             "ranks' files and names the slowest rank of each call). Timestamps are on rank "
             "0's clock, measured at connect."});

algorithms::CallInfo clockCall(const Runtime& rt, int peer) {
  algorithms::CallInfo info;
  info.collective = "clock sync";
  info.algorithm = "ping-pong";
  info.peer = peer;
  info.notes.record = false;
  info.key = transport::MessageKey{kClockSeq, 0, transport::Space::kCollective};
  info.fingerprint =
      transport::Fingerprint{static_cast<std::uint8_t>(algorithms::Collective::kSendRecv),
                             static_cast<std::uint8_t>(DataType::kInt64), 0, -1, 1};
  info.dtype = DataType::kInt64;
  info.timeout = rt.timeout;
  info.deadline = algorithms::Clock::now() + rt.timeout;
  return info;
}

std::shared_ptr<const algorithms::Schedule> finalized(algorithms::Schedule schedule) {
  schedule.finalize();
  return std::make_shared<const algorithms::Schedule>(std::move(schedule));
}

}  // namespace

std::optional<std::string> traceDirectory(const std::optional<std::string>& option,
                                          const Config& config) {
  std::optional<std::string> dir = option ? option : kTrace.get(config);
  if (dir && dir->empty()) return std::nullopt;
  return dir;
}

algorithms::Tracer::Clock measureClock(Runtime& rt) {
  // Ranks on rank 0's host (host index 0: hosts are numbered by their lowest rank).
  auto sameHost = [&rt](int r) { return rt.hostOf[static_cast<std::size_t>(r)] == 0; };
  using Source = algorithms::Tracer::ClockSource;
  algorithms::Tracer::Clock clock;
  constexpr std::uint64_t kBytes = sizeof(std::int64_t);
  // A ping carries 1 (answer it) or 0 (the last: no answer); a pong rank 0's clock.
  std::int64_t ping = 1, value = 0;
  auto exchange = [&rt](int peer, bool send, std::uint32_t step, const algorithms::Bindings& b) {
    algorithms::Schedule s("ping-pong");
    if (send) {
      s.send(peer, step, algorithms::input(), kBytes);
    } else {
      s.recv(peer, step, algorithms::output(), kBytes);
    }
    rt.engine->run(finalized(std::move(s)), b, clockCall(rt, peer));
  };
  if (rt.rank == 0) {
    clock.source = Source::kReference;
    for (int peer = 1; peer < rt.size; ++peer) {
      if (sameHost(peer)) continue;
      for (std::uint32_t step = 0;; step += 2) {
        exchange(peer, false, step, {nullptr, &ping});
        if (ping == 0) break;
        value = algorithms::Tracer::nowNs();
        exchange(peer, true, step + 1, {&value, nullptr});
      }
    }
    return clock;
  }
  if (sameHost(rt.rank)) {
    clock.source = Source::kSameHost;
    return clock;
  }
  clock.source = Source::kMeasured;
  const std::int64_t good =
      std::chrono::duration_cast<std::chrono::nanoseconds>(kGoodRoundTrip).count();
  std::int64_t best = std::numeric_limits<std::int64_t>::max();
  std::uint32_t step = 0;
  for (int k = 0; k < kMaxClockRounds && (k < kMinClockRounds || best > good); ++k, step += 2) {
    // Both in one schedule: the pong's receive is posted with the ping.
    algorithms::Schedule round("ping-pong");
    round.send(0, step, algorithms::input(), kBytes);
    round.recv(0, step + 1, algorithms::output(), kBytes);
    auto schedule = finalized(std::move(round));
    const std::int64_t sent = algorithms::Tracer::nowNs();
    rt.engine->run(std::move(schedule), {&ping, &value}, clockCall(rt, 0));
    const std::int64_t received = algorithms::Tracer::nowNs();
    ++clock.rounds;
    if (received - sent < best) {
      best = received - sent;
      clock.offsetNs = value - (sent + received) / 2;
      clock.roundTripNs = best;
    }
  }
  ping = 0;
  exchange(0, true, step, {&ping, nullptr});
  return clock;
}

}  // namespace collx::detail
