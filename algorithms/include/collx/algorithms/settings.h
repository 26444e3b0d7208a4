// The algorithms layer's settings (declared in algorithms/src/settings.cc): how waiting calls
// wait, the pipelining granularity of the chunked algorithms, and the selection's overrides
// (COLLX_RULES, COLLX_<COLL>_ALGO).
#pragma once

#include <cstdint>

#include "collx/base/setting.h"

namespace collx::algorithms {

enum class Collective : std::uint8_t;  // registry.h
struct EngineOptions;                  // engine.h

// COLLX_CHUNK_BYTES: ScheduleParams::chunkBytes.
extern const Setting<kind::Bytes> kChunkBytes;

// The engine's waits from COLLX_SPIN_US and COLLX_YIELD_US. `outnumbered`: this host's ranks
// outnumber the CPUs they may run on, so that a rank that spins takes the core its peer
// needs (no spinning then unless COLLX_SPIN_US says so).
EngineOptions engineOptions(const Config& config, bool outnumbered);

// COLLX_RULES: a rules file tried before the built-in selection table.
extern const AutoSetting<kind::String> kRules;
// COLLX_<COLL>_ALGO: the algorithm of every call of `coll` (one of its algorithms' names).
const AutoSetting<kind::Choice>& algorithmSetting(Collective coll);

}  // namespace collx::algorithms
