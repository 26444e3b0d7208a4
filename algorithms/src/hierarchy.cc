#include "hierarchy.h"

#include <algorithm>
#include <map>
#include <string>

#include "collx/algorithms/selection.h"
#include "collx/base/check.h"
#include "collx/base/error.h"

namespace collx::algorithms::hierarchy {

Layout Layout::of(const ScheduleParams& p) {
  const int P = p.size;
  Layout l;
  l.hostOf.assign(static_cast<std::size_t>(P), 0);
  l.localOf.resize(static_cast<std::size_t>(P));
  if (!p.hostOf.empty() && p.hostOf.size() != static_cast<std::size_t>(P)) {
    throw InvalidArgument(Where{p.rank, collectiveName(p.coll), -1},
                          "the host layout names " + std::to_string(p.hostOf.size()) +
                              " ranks in a world of " + std::to_string(P));
  }
  // Renumbered by lowest rank, whatever numbers the caller used.
  std::map<int, int> number;
  for (int r = 0; r < P; ++r) {
    const int given = p.hostOf.empty() ? 0 : p.hostOf[static_cast<std::size_t>(r)];
    auto [it, added] = number.emplace(given, static_cast<int>(number.size()));
    if (added) l.members.emplace_back();
    l.hostOf[static_cast<std::size_t>(r)] = it->second;
    l.localOf[static_cast<std::size_t>(r)] = static_cast<int>(l.members[it->second].size());
    l.members[it->second].push_back(r);
  }
  l.hosts = static_cast<int>(l.members.size());
  return l;
}

bool Layout::even() const {
  for (const auto& m : members) {
    if (m.size() != members[0].size()) return false;
  }
  return true;
}

bool Layout::flat() const { return hosts == 1 || hosts == static_cast<int>(hostOf.size()); }

bool Layout::contiguous() const {
  for (int r = 0; r < static_cast<int>(hostOf.size()); ++r) {
    if (hostMajor(r) != r) return false;
  }
  return true;
}

int Layout::hostMajor(int r) const {
  const int h = hostOf[static_cast<std::size_t>(r)];
  int before = 0;
  for (int i = 0; i < h; ++i) before += size(i);
  return before + localOf[static_cast<std::size_t>(r)];
}

std::vector<int> Layout::column(int local) const {
  std::vector<int> out;
  for (const auto& m : members) {
    if (local < static_cast<int>(m.size())) out.push_back(m[static_cast<std::size_t>(local)]);
  }
  return out;
}

const AlgorithmInfo& groupChoice(const ScheduleParams& group) {
  static const SelectionPolicy kPolicy;  // the built-in table, one host, no shared memory
  return *select(group, kPolicy).algorithm;
}

ScheduleParams groupParams(const ScheduleParams& p, Collective coll, int rank, int size) {
  ScheduleParams g;
  g.coll = coll;
  g.rank = rank;
  g.size = size;
  g.count = p.count;
  g.elementSize = p.elementSize;
  g.op = p.op == ReduceOpKind::kAvg ? ReduceOpKind::kSum : p.op;
  g.inPlace = p.inPlace;
  g.root = 0;
  g.chunkBytes = p.chunkBytes;
  g.commutative = p.commutative;
  return g;
}

namespace {

BufferRef mapRef(const BufferRef& ref, const Phase& phase) {
  switch (ref.buffer) {
    case Buffer::kInput:
      return {phase.input.buffer, phase.input.offset + ref.offset};
    case Buffer::kOutput:
      return {phase.output.buffer, phase.output.offset + ref.offset};
    case Buffer::kScratch:
      return scratch(phase.scratchBase + ref.offset);
  }
  return ref;
}

}  // namespace

Deps append(Schedule& s, Schedule sub, const Phase& phase, const Deps& after) {
  sub.finalize();
  const auto& tasks = sub.tasks();
  if (tasks.empty()) return after;
  s.setScratchBytes(std::max(s.scratchBytes(), phase.scratchBase + sub.scratchBytes()));
  // The dependencies of each task, from the dependents finalize() left.
  std::vector<Deps> deps(tasks.size());
  for (TaskId id = 0; id < tasks.size(); ++id) {
    for (std::uint32_t i = 0; i < tasks[id].dependentCount; ++i) {
      deps[sub.dependents()[tasks[id].firstDependent + i]].push_back(id);
    }
  }
  std::vector<TaskId> mapped(tasks.size());
  Deps ends;
  for (TaskId id = 0; id < tasks.size(); ++id) {
    const Task& t = tasks[id];
    Deps d;
    if (deps[id].empty()) {
      d = after;
    } else {
      for (TaskId dep : deps[id]) d.push_back(mapped[dep]);
    }
    const int peer = t.peer >= 0 && static_cast<std::size_t>(t.peer) < phase.group.size()
                         ? phase.group[static_cast<std::size_t>(t.peer)]
                         : t.peer;
    COLLX_CHECK_LT(t.step, kPhaseSteps);
    const std::uint32_t step = phase.index * kPhaseSteps + t.step;
    switch (t.kind) {
      case TaskKind::kSend:
        mapped[id] = s.send(peer, step, mapRef(t.src, phase), t.bytes, std::move(d));
        break;
      case TaskKind::kRecv:
        mapped[id] = s.recv(peer, step, mapRef(t.dst, phase), t.bytes, std::move(d));
        break;
      case TaskKind::kReduce:
        mapped[id] = s.reduce(mapRef(t.dst, phase), mapRef(t.a, phase), mapRef(t.src, phase),
                              t.count, std::move(d));
        break;
      case TaskKind::kCopy:
        mapped[id] = s.copy(mapRef(t.dst, phase), mapRef(t.src, phase), t.bytes, std::move(d));
        break;
      case TaskKind::kDivide:
        mapped[id] = s.divide(mapRef(t.dst, phase), t.count, std::move(d));
        break;
      case TaskKind::kShared:  // groups choose without shared memory (groupChoice)
        COLLX_CHECK(t.kind != TaskKind::kShared);
        break;
    }
    if (t.dependentCount == 0) ends.push_back(mapped[id]);
  }
  if (ends.size() == 1) return ends;
  return {s.copy(output(), output(), 0, std::move(ends))};
}

void addGroup(Plan& plan, const AlgorithmInfo& algorithm, const ScheduleParams& params,
              Phase phase) {
  Part part;
  part.kind = Part::Kind::kGroup;
  part.algorithm = &algorithm;
  part.params = params;
  part.phase = std::move(phase);
  plan.push_back(std::move(part));
}

void addDivide(Plan& plan, BufferRef at, std::uint64_t count) {
  Part divide;
  divide.kind = Part::Kind::kDivide;
  divide.phase.output = at;
  divide.size = count;
  plan.push_back(divide);
}

void addHostBroadcast(Plan& plan, const ScheduleParams& p, std::vector<int> members, int local,
                      int root, std::uint64_t count, std::uint64_t scratchBase,
                      std::uint32_t index) {
  const int L = static_cast<int>(members.size());
  ScheduleParams bc = groupParams(p, Collective::kBroadcast, local, L);
  bc.root = root;
  bc.inPlace = true;
  bc.count = count;
  addGroup(plan, groupChoice(bc), bc,
           Phase{std::move(members), output(), output(), scratchBase, index});
}

Schedule build(const Plan& plan, const char* name) {
  Schedule s(name);
  Deps after;
  Deps copies;  // consecutive copies run side by side
  for (const Part& part : plan) {
    if (part.kind != Part::Kind::kCopy && !copies.empty()) {
      after = std::move(copies);
      copies.clear();
    }
    switch (part.kind) {
      case Part::Kind::kGroup:
        after = append(s, part.algorithm->build(part.params), part.phase, after);
        break;
      case Part::Kind::kDivide:
        if (part.size > 0) after = {s.divide(part.phase.output, part.size, after)};
        break;
      case Part::Kind::kCopy:
        if (part.size > 0) copies.push_back(s.copy(part.phase.output, part.src, part.size, after));
        break;
    }
  }
  return s;
}

Cost cost(const Plan& plan) {
  Cost c;
  for (const Part& part : plan) {
    if (part.kind == Part::Kind::kGroup && part.algorithm->cost != nullptr) {
      add(c, part.algorithm->cost(part.params));
    }
  }
  return c;
}

}  // namespace collx::algorithms::hierarchy
