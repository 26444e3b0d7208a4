#include "process_probe.h"

#include <fstream>
#include <sstream>

namespace collx::detail {

const char* processStateName(ProcessState state) noexcept {
  switch (state) {
    case ProcessState::kRunning:
      return "running";
    case ProcessState::kStopped:
      return "stopped";
    case ProcessState::kZombie:
      return "zombie";
    case ProcessState::kGone:
      return "gone";
    case ProcessState::kOtherHost:
      return "other host";
  }
  return "unknown";
}

namespace {

std::optional<ProcStat> parseStat(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  // "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses; the last ')' ends it.
  std::size_t close = line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(line.substr(close + 1));
  ProcStat stat;
  std::string skipped;  // field 4 (ppid), then 6 to 21
  if (!(fields >> stat.state >> skipped >> stat.pgrp)) return std::nullopt;
  for (int field = 6; field < 22; ++field) {
    if (!(fields >> skipped)) return std::nullopt;
  }
  if (!(fields >> stat.startTime)) return std::nullopt;
  return stat;
}

}  // namespace

std::optional<ProcStat> readProcStat(std::int64_t pid) {
  if (pid <= 0) return std::nullopt;
  return parseStat("/proc/" + std::to_string(pid) + "/stat");
}

std::uint64_t ownStartTime() {
  std::optional<ProcStat> stat = parseStat("/proc/self/stat");
  return stat ? stat->startTime : 0;
}

ProcessState probeProcess(const PeerInfo& peer, const PeerInfo& here) {
  if (peer.pid <= 0 || peer.hostname.empty() || peer.hostname != here.hostname) {
    return ProcessState::kOtherHost;
  }
  if (!peer.bootId.empty() && !here.bootId.empty() && peer.bootId != here.bootId) {
    return ProcessState::kOtherHost;
  }
  std::optional<ProcStat> stat = readProcStat(peer.pid);
  if (!stat) return ProcessState::kGone;
  if (peer.startTime != 0 && stat->startTime != peer.startTime) return ProcessState::kGone;
  switch (stat->state) {
    case 'Z':
      return ProcessState::kZombie;
    case 'X':  // dead, being reaped
      return ProcessState::kGone;
    case 'T':
    case 't':
      return ProcessState::kStopped;
    default:
      return ProcessState::kRunning;
  }
}

Probe hostProbe() {
  PeerInfo here = localPeerInfo(-1, -1);
  return [here](const PeerInfo& peer) { return probeProcess(peer, here); };
}

}  // namespace collx::detail
