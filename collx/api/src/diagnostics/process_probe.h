// What became of another process of the job, from its join record (internal; the hang report
// uses it for the ranks that did not answer).
//
// On the same host (equal hostname, and boot id when both records have one), /proc/<pid>/stat
// tells whether the process still exists, and its start time (field 22, clock ticks after
// boot, which the join record carries) tells it from a later process that reused its pid.
// On another host nothing can be told from here.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "collx/context.h"

namespace collx::detail {

enum class ProcessState : std::uint8_t {
  kRunning,    // exists (running, sleeping, in I/O): alive, whatever it does
  kStopped,    // T or t: SIGSTOP, or a debugger holds it
  kZombie,     // Z: dead, not yet reaped by its parent
  kGone,       // no such pid, or another process (another start time) holds it now
  kOtherHost,  // cannot tell from here (another host, or the record names no pid)
};

// "running", "stopped", "zombie", "gone", "other host".
const char* processStateName(ProcessState state) noexcept;

// Fields 3 (state), 5 (pgrp) and 22 (starttime) of /proc/<pid>/stat.
struct ProcStat {
  char state = '?';
  std::int64_t pgrp = 0;
  std::uint64_t startTime = 0;
};
// nullopt when there is no such process (or its stat cannot be read or parsed).
std::optional<ProcStat> readProcStat(std::int64_t pid);
// This process's start time (field 22 of /proc/self/stat); 0 when unknown.
std::uint64_t ownStartTime();

// Classifies the process a join record names, as seen from the host `here` names (its
// hostname and boot id; localPeerInfo's). Blocking only on reading one /proc file.
ProcessState probeProcess(const PeerInfo& peer, const PeerInfo& here);

// How the diagnosis asks about a rank that did not answer: probeProcess from this host in the
// library, anything in tests.
using Probe = std::function<ProcessState(const PeerInfo& peer)>;
// probeProcess from this host (its name and boot id read once, now).
Probe hostProbe();

}  // namespace collx::detail
