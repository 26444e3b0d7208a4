#include "collx/algorithms/learner.h"

#include <algorithm>
#include <bit>
#include <cstdio>

#include "collx/base/units.h"

namespace collx::algorithms {

const Setting<kind::Choice> kSelection(
    {.name = "COLLX_SELECTION",
     .component = "algorithms.selection",
     .defaultValue = "table",
     .range = {"table", "learn"},
     .help = "'table': a call's algorithm comes from the rules file and the built-in table. "
             "'learn': the first blocking calls of each collective and size class (a power of "
             "two of bytes) try every algorithm that can take them, COLLX_LEARN_TRIALS times "
             "each (4 times as many below 64 KiB) after a first, untimed one; the ranks then agree "
             "on the fastest (the "
             "slowest rank's median per algorithm: one small allreduce) and every later call "
             "of the class runs it. An algorithm named in the call's options or in "
             "COLLX_<COLL>_ALGO is kept. Every rank must make the same calls blocking."});

const Setting<kind::Integer> kLearnTrials(
    {.name = "COLLX_LEARN_TRIALS",
     .component = "algorithms.selection",
     .defaultValue = 3,
     .range = {1, 100},
     .help = "COLLX_SELECTION=learn: timed calls of each algorithm per size class."});

namespace {

int sizeClassOf(const ScheduleParams& p) {
  // gatherv's and scatterv's bytes are this rank's own: one class for every call.
  if (p.coll == Collective::kGatherv || p.coll == Collective::kScatterv) return -1;
  return static_cast<int>(std::bit_width(selectionBytes(p)));
}

}  // namespace

Learner::Pick Learner::pick(const ScheduleParams& params, const SelectionPolicy& policy,
                            const Choice& table, bool blocking) {
  Pick out{table.algorithm, table.source};
  const auto key =
      std::make_tuple(static_cast<int>(params.coll), sizeClassOf(params), params.commutative);
  auto found = index_.find(key);
  if (found == index_.end()) {
    Slot slot{params.coll, std::get<1>(key), eligibleAlgorithms(params, policy), {}, 0,
              nullptr,     trials_};
    // Calls below 64 KiB take microseconds, where one preemption outweighs the difference
    // between algorithms: four times the trials (every rank alike: a count, never a time).
    if (slot.sizeClass >= 0 && slot.sizeClass <= 16) slot.trials = 4 * trials_;
    if (slot.candidates.size() <= 1) slot.chosen = table.algorithm;  // nothing to learn
    slot.seconds.resize(slot.candidates.size());
    found = index_.emplace(key, static_cast<int>(slots_.size())).first;
    slots_.push_back(std::move(slot));
  }
  Slot& slot = slots_[static_cast<std::size_t>(found->second)];
  if (slot.chosen != nullptr) {
    out.algorithm = slot.chosen;
    out.source = "learned";
    return out;
  }
  const std::uint64_t C = slot.candidates.size();
  if (!blocking || slot.calls >= C * (1 + static_cast<std::uint64_t>(slot.trials))) return out;
  out.candidate = static_cast<int>(slot.calls % C);
  out.cold = slot.calls < C;
  out.slot = found->second;
  out.algorithm = slot.candidates[static_cast<std::size_t>(out.candidate)];
  out.source = "learning (a trial)";
  ++slot.calls;
  return out;
}

bool Learner::record(const Pick& pick, double seconds) {
  Slot& slot = slots_[static_cast<std::size_t>(pick.slot)];
  // The first call of each candidate is cold (its schedule built, its buffers touched).
  if (!pick.cold) slot.seconds[static_cast<std::size_t>(pick.candidate)].push_back(seconds);
  return std::all_of(slot.seconds.begin(), slot.seconds.end(), [&slot](const auto& s) {
    return s.size() >= static_cast<std::size_t>(slot.trials);
  });
}

std::vector<double> Learner::offer(int slot) const {
  std::vector<double> out;
  for (std::vector<double> s : slots_[static_cast<std::size_t>(slot)].seconds) {
    std::nth_element(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(s.size() / 2), s.end());
    out.push_back(s[s.size() / 2]);
  }
  return out;
}

const AlgorithmInfo& Learner::decide(int slot, const std::vector<double>& agreed) {
  Slot& s = slots_[static_cast<std::size_t>(slot)];
  std::size_t best = 0;
  for (std::size_t i = 1; i < agreed.size() && i < s.candidates.size(); ++i) {
    if (agreed[i] < agreed[best]) best = i;
  }
  s.chosen = s.candidates[best];
  return *s.chosen;
}

std::string Learner::describe(int slot) const {
  const Slot& s = slots_[static_cast<std::size_t>(slot)];
  std::string out = collectiveName(s.coll);
  if (s.sizeClass < 0) return out + ", any size";
  if (s.sizeClass == 0) return out + ", 0 B";
  const std::uint64_t low = std::uint64_t{1} << (s.sizeClass - 1);
  return out + ", " + formatBytes(low) + " to under " + formatBytes(2 * low);
}

std::string Learner::describeTimes(int slot, const std::vector<double>& agreed) const {
  const Slot& s = slots_[static_cast<std::size_t>(slot)];
  std::string out;
  for (std::size_t i = 0; i < s.candidates.size() && i < agreed.size(); ++i) {
    char time[32];
    std::snprintf(time, sizeof time, " %.1f us", agreed[i] * 1e6);
    out += (out.empty() ? "" : ", ") + std::string(s.candidates[i]->name) + time;
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> Learner::learned() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].chosen != nullptr && slots_[i].candidates.size() > 1) {
      out.emplace_back(describe(static_cast<int>(i)), slots_[i].chosen->name);
    }
  }
  return out;
}

}  // namespace collx::algorithms
