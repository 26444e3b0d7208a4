// What the hierarchical algorithms share: the host layout of a call (ScheduleParams::hostOf
// as groups of ranks) and composition: a schedule built for a group of ranks (the ranks of
// one host, or one rank per host) appended as a phase of this rank's schedule, its ranks,
// buffers, message steps and scratch mapped into ours.
#pragma once

#include <cstdint>
#include <vector>

#include "builders.h"

namespace collx::algorithms::hierarchy {

// The hosts of a call. Hosts are numbered in the order of their lowest rank and each host's
// ranks are in rank order; hostOf empty (or naming one host) is one host of every rank.
struct Layout {
  int hosts = 1;
  std::vector<std::vector<int>> members;  // the ranks of each host
  std::vector<int> hostOf;                // by rank
  std::vector<int> localOf;               // by rank: its index among its host's ranks

  // Throws InvalidArgument when hostOf is neither empty nor one entry per rank.
  static Layout of(const ScheduleParams& p);

  int size(int host) const { return static_cast<int>(members[host].size()); }
  // Every host has the same number of ranks.
  bool even() const;
  // One host, or one rank on every host: nothing to gain from a hierarchy.
  bool flat() const;
  // The ranks of every host follow one another, hosts in order (rank r is host-major
  // position r).
  bool contiguous() const;
  // The position of rank r when the ranks are listed host by host.
  int hostMajor(int r) const;
  // The ranks with local index `local` on every host that has one, in host order.
  std::vector<int> column(int local) const;
};

// The algorithm a group's call takes (`group`: its params, as groupParams() makes them):
// select() over the built-in table, as for a job of one host without shared memory (the
// phases are schedules). The same on every rank of the group: the same params but the rank.
const AlgorithmInfo& groupChoice(const ScheduleParams& group);

// One phase: a schedule built for `group` (group rank i is rank group[i]) and where its
// buffers lie in ours. Its scratch starts at `scratchBase` of ours.
struct Phase {
  std::vector<int> group;
  BufferRef input;
  BufferRef output;
  std::uint64_t scratchBase = 0;
  std::uint32_t index = 0;  // message steps of phase i are i * kPhaseSteps + the group's step
};

inline constexpr std::uint32_t kPhaseSteps = 1u << 27;

// Appends `sub` to `s` as phase `phase`: its tasks without dependencies wait for `after`.
// Returns the task that ends the phase (a zero-byte copy that waits for every task of the
// phase without dependents, or that task alone), or `after` when the phase has no task.
// Phases chained this way run one after the other on this rank, so they share scratch.
Deps append(Schedule& s, Schedule sub, const Phase& phase, const Deps& after);

// The params of a group's call: `p` with the group's rank and size, no per-rank vectors,
// no host layout, and a sum where p averages (the hierarchical algorithm divides once).
ScheduleParams groupParams(const ScheduleParams& p, Collective coll, int rank, int size);

// A hierarchical algorithm as a plan: phases run one after the other on this rank, each a
// group's call, a division (avg) or a copy. The builder runs the plan, the cost function
// sums the groups' own cost formulas over the same plan, so the two cannot drift apart.
struct Part {
  enum class Kind : std::uint8_t { kGroup, kDivide, kCopy };
  Kind kind = Kind::kGroup;
  const AlgorithmInfo* algorithm = nullptr;  // kGroup
  ScheduleParams params;                     // kGroup: the group's call
  Phase phase;                               // kGroup; kDivide, kCopy: phase.output is dst
  BufferRef src;                             // kCopy
  std::uint64_t size = 0;                    // kDivide: elements; kCopy: bytes
};
using Plan = std::vector<Part>;

// Adds a group's call to the plan (a group of one rank is fine: its call is local).
void addGroup(Plan& plan, const AlgorithmInfo& algorithm, const ScheduleParams& params,
              Phase phase);

// Appends the division of `count` elements at `at` by the number of ranks (avg).
void addDivide(Plan& plan, BufferRef at, std::uint64_t count);

// Appends, as phase `index`, a broadcast in place in the output among the ranks of one host
// (`members`; this rank is local rank `local` of them) of `count` elements from local rank
// `root`, by the table's algorithm for that many ranks and bytes; its scratch from
// `scratchBase`. The last phase of every hierarchical algorithm.
void addHostBroadcast(Plan& plan, const ScheduleParams& p, std::vector<int> members, int local,
                      int root, std::uint64_t count, std::uint64_t scratchBase,
                      std::uint32_t index);

Schedule build(const Plan& plan, const char* name);
Cost cost(const Plan& plan);

// A Cost plus another.
inline void add(Cost& c, const Cost& d) {
  c.sends += d.sends;
  c.sendBytes += d.sendBytes;
  c.recvs += d.recvs;
  c.recvBytes += d.recvBytes;
  c.reducedElements += d.reducedElements;
}

}  // namespace collx::algorithms::hierarchy
