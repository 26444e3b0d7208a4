// Traces (COLLX_TRACE): a context's trace file and its clock's offset to rank 0's
// (internal to collx::collx; the engine writes the events: algorithms/tracer.h).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "../runtime.h"
#include "collx/algorithms/tracer.h"
#include "collx/base/config.h"

namespace collx::detail {

// The directory traces go to: `option` (ContextOptions::traceDir) when set, else COLLX_TRACE;
// nullopt when neither is (tracing off). An empty option turns tracing off.
std::optional<std::string> traceDirectory(const std::optional<std::string>& option,
                                          const Config& config);

// This rank's clock against rank 0's (every rank of the context calls it at once). A rank on
// rank 0's host (Runtime::hostOf: the same host identity, so the same steady clock) takes
// offset 0 and sends nothing; the others measure it by ping-pong with rank 0, which
// answers them one after the other: at least kMinClockRounds rounds, more (up to
// kMaxClockRounds) while no round trip was shorter than kGoodRoundTrip; the sample with the
// shortest round trip gives offset = t0 - (t_send + t_recv) / 2. The messages use a key no
// user call can take (sequence number ~0 - 1), outside the flight recorder, the trace and
// the counters. Throws like a collective.
algorithms::Tracer::Clock measureClock(Runtime& rt);

inline constexpr int kMinClockRounds = 8;
inline constexpr int kMaxClockRounds = 64;
inline constexpr std::chrono::microseconds kGoodRoundTrip{100};

}  // namespace collx::detail
