// Learner: selection that learns inside a job (COLLX_SELECTION=learn).
//
// Calls are grouped in classes: collective, size class (the selection bytes' power of two;
// one class for gatherv and scatterv, whose bytes differ between ranks) and whether the op
// commutes. The first blocking calls of a class try its candidates (every algorithm that can
// take the call, eligibleAlgorithms()) in turn, call i the candidate i mod C, until each ran
// 1 + trials times (4 x trials below 64 KiB, where calls take microseconds). A rank times
// each of its calls; the first of each candidate, cold, is not counted, and the API has the
// ranks meet after each trial of a rooted collective, whose calls back to back would
// overlap. Then every rank offers its median per candidate, the ranks agree on the slowest
// rank's (an allreduce of the maxima, which the API runs: decide()), and each takes the
// candidate with the lowest: every rank the same one, from the same numbers. Later calls of
// the class run it. A nonblocking call takes the class's learned algorithm once there is
// one, the table's before (its time is not the call's own): every rank must therefore make
// the same calls blocking, as it must make the same calls.
//
// Not thread-safe: the API calls it under the context's selection mutex.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "collx/algorithms/registry.h"
#include "collx/algorithms/selection.h"
#include "collx/base/setting.h"

namespace collx::algorithms {

// COLLX_SELECTION ("table" or "learn") and COLLX_LEARN_TRIALS.
extern const Setting<kind::Choice> kSelection;
extern const Setting<kind::Integer> kLearnTrials;

class Learner {
 public:
  explicit Learner(int trials) : trials_(trials < 1 ? 1 : trials) {}

  // What a call whose table choice is `table` runs. A blocking call in a class still
  // learning gets a trial: `trial` is set, and the caller times the call and reports it to
  // record(). (For a nonblocking call, `blocking` false: never a trial.)
  struct Pick {
    const AlgorithmInfo* algorithm = nullptr;
    const char* source = "";
    int slot = -1;       // the class, for record(); -1: not a trial
    int candidate = -1;  // which of its candidates
    bool cold = false;   // the candidate's first call: not counted
  };
  Pick pick(const ScheduleParams& params, const SelectionPolicy& policy, const Choice& table,
            bool blocking);
  // The seconds a trial call took on this rank. True when the class has tried everything:
  // the caller then agrees with the other ranks on the times (offer(), then decide()).
  bool record(const Pick& pick, double seconds);
  // This rank's median seconds per candidate of a class that record() said is complete.
  std::vector<double> offer(int slot) const;
  // The agreed times (the slowest rank's per candidate): the class's algorithm from now on.
  const AlgorithmInfo& decide(int slot, const std::vector<double>& agreed);
  // "allreduce, 64 KiB to under 128 KiB": a class, for logs.
  std::string describe(int slot) const;
  // "ring 12.5 us, shm 3.1 us": the candidates with the agreed times, for logs.
  std::string describeTimes(int slot, const std::vector<double>& agreed) const;
  // Classes whose algorithm was learned, and which: for collx-info-like reports and tests.
  std::vector<std::pair<std::string, std::string>> learned() const;

 private:
  struct Slot {
    Collective coll;
    int sizeClass;  // 0: 0 bytes; k: 2^(k-1) .. 2^k - 1 bytes; -1: one class
    std::vector<const AlgorithmInfo*> candidates;
    std::vector<std::vector<double>> seconds;  // per candidate, the timed trials
    std::uint64_t calls = 0;                   // trials given out
    const AlgorithmInfo* chosen = nullptr;
    int trials;  // timed calls per candidate
  };
  int trials_;
  std::map<std::tuple<int, int, bool>, int> index_;
  std::vector<Slot> slots_;
};

}  // namespace collx::algorithms
