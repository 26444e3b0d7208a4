// Every registered algorithm's schedules, all ranks at once, run in one thread by a small
// randomized executor instead of the transport: P up to 64 in milliseconds. It checks what
// a real run cannot show so directly:
// - every send meets one receive of the same size (no step used twice in one direction),
//   and nothing deadlocks;
// - the results against serial references (rank order too, for algorithms that claim it);
// - hazards: a send reads its bytes only when it is delivered, at a random moment after it
//   was posted, and tasks run in random order, so a missing dependency shows as wrong data;
// - the registry's cost formula equals the counted sends, receives, bytes and reductions.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <tuple>

#include "collx/algorithms/reduce.h"
#include "collx/algorithms/registry.h"
#include "collx/algorithms/selection.h"
#include "util/reference.h"

namespace collx::algorithms {
namespace {

constexpr int kSizes[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 32, 64};

using test::matmul;

// Rank r's element i: small, distinct, and a non-trivial matrix for the matrix op.
std::int64_t valueOf(int r, std::uint64_t i) {
  const std::uint64_t x = static_cast<std::uint64_t>(r) + 1, y = i % 7 + 1;
  return static_cast<std::int64_t>(1 | (x + y) << 16 | ((x * 3 + y) % 5) << 32 | 1ull << 48);
}

// One rank's buffers and its schedule's progress.
struct Rank {
  std::shared_ptr<Schedule> schedule;
  std::uint8_t* input = nullptr;
  std::uint8_t* output = nullptr;
  // The storage the input and the output point into (they may share one), for bounds.
  std::pair<const std::uint8_t*, std::size_t> inputStorage, outputStorage;
  std::vector<std::uint8_t> scratch;
  std::vector<std::uint32_t> remaining;
  std::uint64_t done = 0;
};

using MessageKey = std::tuple<int, int, std::uint32_t>;  // from, to, step

// Runs the schedules of every rank; returns "" or what went wrong.
std::string execute(std::vector<Rank>& ranks, const ReduceOp& op, std::mt19937& rng) {
  const int P = static_cast<int>(ranks.size());
  std::vector<std::pair<int, TaskId>> computable;
  std::map<MessageKey, std::pair<int, TaskId>> sends, recvs;
  std::vector<MessageKey> matched;
  std::string error;
  auto pointer = [&](int r, const BufferRef& ref) -> std::uint8_t* {
    switch (ref.buffer) {
      case Buffer::kInput:
        return ranks[r].input + ref.offset;
      case Buffer::kOutput:
        return ranks[r].output + ref.offset;
      case Buffer::kScratch:
        return ranks[r].scratch.data() + ref.offset;
    }
    return nullptr;
  };
  // Every task must stay inside the buffers it names.
  auto inside = [&](int r, const BufferRef& ref, std::uint64_t bytes) {
    const Rank& rank = ranks[r];
    const std::uint8_t* at = pointer(r, ref);
    std::pair<const std::uint8_t*, std::size_t> storage{rank.scratch.data(), rank.scratch.size()};
    if (ref.buffer == Buffer::kInput) storage = rank.inputStorage;
    if (ref.buffer == Buffer::kOutput) storage = rank.outputStorage;
    if (bytes == 0) return;
    if (at < storage.first || at + bytes > storage.first + storage.second) {
      error = "rank " + std::to_string(r) + " reaches past buffer " +
              std::to_string(static_cast<int>(ref.buffer)) + ": offset " +
              std::to_string(ref.offset) + " + " + std::to_string(bytes);
    }
  };
  auto ready = [&](int r, TaskId id) {
    const Task& t = ranks[r].schedule->tasks()[id];
    if (t.kind != TaskKind::kSend && t.kind != TaskKind::kRecv) {
      computable.emplace_back(r, id);
      return;
    }
    const bool send = t.kind == TaskKind::kSend;
    const MessageKey key = send ? MessageKey{r, t.peer, t.step} : MessageKey{t.peer, r, t.step};
    if (t.peer < 0 || t.peer >= P || t.peer == r) {
      error = "rank " + std::to_string(r) + " addresses peer " + std::to_string(t.peer);
    }
    auto& mine = send ? sends : recvs;
    auto& theirs = send ? recvs : sends;
    if (!mine.emplace(key, std::pair{r, id}).second) {
      error = "step " + std::to_string(t.step) + " from " + std::to_string(std::get<0>(key)) +
              " to " + std::to_string(std::get<1>(key)) + " is used twice";
    }
    if (theirs.count(key)) matched.push_back(key);
  };
  auto complete = [&](int r, TaskId id) {
    Rank& rank = ranks[r];
    const Task& t = rank.schedule->tasks()[id];
    ++rank.done;
    for (std::uint32_t i = 0; i < t.dependentCount; ++i) {
      const TaskId d = rank.schedule->dependents()[t.firstDependent + i];
      if (--rank.remaining[d] == 0) ready(r, d);
    }
  };
  for (int r = 0; r < P; ++r) {
    Rank& rank = ranks[r];
    rank.schedule->finalize();
    rank.scratch.assign(rank.schedule->scratchBytes(), 0xA5);
    const auto& tasks = rank.schedule->tasks();
    rank.remaining.resize(tasks.size());
    for (TaskId id = 0; id < tasks.size(); ++id) rank.remaining[id] = tasks[id].depCount;
    for (TaskId id = 0; id < tasks.size(); ++id) {
      if (tasks[id].depCount == 0) ready(r, id);
    }
  }
  while (error.empty() && (!computable.empty() || !matched.empty())) {
    std::uniform_int_distribution<std::size_t> pick(0, computable.size() + matched.size() - 1);
    std::size_t choice = pick(rng);
    if (choice < computable.size()) {
      auto [r, id] = computable[choice];
      computable[choice] = computable.back();  // order does not matter: picks are random
      computable.pop_back();
      const Task& t = ranks[r].schedule->tasks()[id];
      const std::uint64_t bytes = t.kind == TaskKind::kCopy ? t.bytes : t.count * 8;
      inside(r, t.dst, bytes);
      if (t.kind == TaskKind::kReduce) inside(r, t.a, bytes);
      if (t.kind != TaskKind::kDivide) inside(r, t.src, bytes);
      if (!error.empty()) break;
      if (t.kind == TaskKind::kReduce) {
        reduce(pointer(r, t.dst), pointer(r, t.a), pointer(r, t.src), t.count, DataType::kInt64,
               op);
      } else if (t.kind == TaskKind::kCopy) {
        if (t.bytes > 0) std::memmove(pointer(r, t.dst), pointer(r, t.src), t.bytes);
      } else {
        divideBy(pointer(r, t.dst), t.count, DataType::kInt64, static_cast<std::uint64_t>(P));
      }
      complete(r, id);
      continue;
    }
    choice -= computable.size();
    const MessageKey key = matched[choice];
    matched[choice] = matched.back();
    matched.pop_back();
    auto [from, sendId] = sends.at(key);
    auto [to, recvId] = recvs.at(key);
    sends.erase(key);
    recvs.erase(key);
    const Task& s = ranks[from].schedule->tasks()[sendId];
    const Task& d = ranks[to].schedule->tasks()[recvId];
    if (s.bytes != d.bytes) {
      return "step " + std::to_string(s.step) + " from " + std::to_string(from) + " to " +
             std::to_string(to) + ": " + std::to_string(s.bytes) + " bytes sent, " +
             std::to_string(d.bytes) + " expected";
    }
    inside(from, s.src, s.bytes);
    inside(to, d.dst, d.bytes);
    if (!error.empty()) break;
    if (s.bytes > 0) std::memcpy(pointer(to, d.dst), pointer(from, s.src), s.bytes);
    complete(from, sendId);
    complete(to, recvId);
  }
  if (!error.empty()) return error;
  for (int r = 0; r < P; ++r) {
    if (ranks[r].done != ranks[r].schedule->tasks().size()) {
      std::string what = "deadlock: rank " + std::to_string(r) + " finished " +
                         std::to_string(ranks[r].done) + " of " +
                         std::to_string(ranks[r].schedule->tasks().size()) + " tasks";
      for (const auto& [key, at] : sends) {
        what += "; unmatched send " + std::to_string(std::get<0>(key)) + "->" +
                std::to_string(std::get<1>(key)) + " step " + std::to_string(std::get<2>(key));
        break;
      }
      for (const auto& [key, at] : recvs) {
        what += "; unmatched recv " + std::to_string(std::get<0>(key)) + "->" +
                std::to_string(std::get<1>(key)) + " step " + std::to_string(std::get<2>(key));
        break;
      }
      return what;
    }
  }
  return "";
}

Cost counted(const Schedule& s) {
  Cost c;
  for (const Task& t : s.tasks()) {
    if (t.kind == TaskKind::kSend) {
      ++c.sends;
      c.sendBytes += t.bytes;
    } else if (t.kind == TaskKind::kRecv) {
      ++c.recvs;
      c.recvBytes += t.bytes;
    } else if (t.kind == TaskKind::kReduce) {
      c.reducedElements += t.count;
    }
  }
  return c;
}

std::string describe(const Cost& c) {
  return std::to_string(c.sends) + " sends (" + std::to_string(c.sendBytes) + " B), " +
         std::to_string(c.recvs) + " recvs (" + std::to_string(c.recvBytes) + " B), " +
         std::to_string(c.reducedElements) + " reduced";
}

// The serial reference of a reduction over ranks 0..P-1, element by element.
std::vector<std::int64_t> reference(int P, std::uint64_t count, std::uint64_t first,
                                    ReduceOpKind kind, bool matrix) {
  std::vector<std::int64_t> out(count);
  for (std::uint64_t i = 0; i < count; ++i) {
    std::uint64_t acc = static_cast<std::uint64_t>(valueOf(0, first + i));
    for (int r = 1; r < P; ++r) {
      const auto x = static_cast<std::uint64_t>(valueOf(r, first + i));
      acc = matrix ? matmul(acc, x) : acc + x;
    }
    out[i] = static_cast<std::int64_t>(acc);
    if (kind == ReduceOpKind::kAvg) out[i] /= P;
  }
  return out;
}

std::vector<std::uint64_t> prefix(const std::vector<std::uint64_t>& counts, std::uint64_t gap) {
  std::vector<std::uint64_t> out(counts.size());
  std::uint64_t at = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    at += gap;
    out[i] = at;
    at += counts[i];
  }
  return out;
}

std::uint64_t extent(const std::vector<std::uint64_t>& counts,
                     const std::vector<std::uint64_t>& displs) {
  std::uint64_t end = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) end = std::max(end, displs[i] + counts[i]);
  return end + 2;
}

constexpr std::int64_t kPoison = -77;

// One case: a collective's inputs on every rank, the run, and the check of every output.
class Case {
 public:
  Case(const AlgorithmInfo& info, int P, std::uint64_t scale, int root, bool inPlace,
       ReduceOpKind kind, bool matrix, std::uint64_t chunkBytes)
      : info_(info),
        P_(P),
        scale_(scale),
        root_(root),
        inPlace_(inPlace),
        kind_(kind),
        matrix_(matrix),
        chunk_(chunkBytes) {}

  std::string run(std::mt19937& rng) {
    ranks_.assign(P_, Rank{});
    inputs_.assign(P_, {});
    outputs_.assign(P_, {});
    std::vector<ScheduleParams> params(P_);
    for (int r = 0; r < P_; ++r) {
      params[r] = paramsFor(r);
      try {
        ranks_[r].schedule = std::make_shared<Schedule>(info_.build(params[r]));
      } catch (const std::exception& e) {
        return "rank " + std::to_string(r) + " refused: " + e.what();
      }
      ranks_[r].input = reinterpret_cast<std::uint8_t*>(inputs_[r].data());
      ranks_[r].output = reinterpret_cast<std::uint8_t*>(outputs_[r].data());
      ranks_[r].inputStorage = {ranks_[r].input, inputs_[r].size() * 8};
      ranks_[r].outputStorage = {ranks_[r].output, outputs_[r].size() * 8};
      if (aliased_[r] >= 0) {
        ranks_[r].input = ranks_[r].output + static_cast<std::uint64_t>(aliased_[r]) * 8;
        ranks_[r].inputStorage = ranks_[r].outputStorage;
      } else if (aliased_[r] == -2) {  // the output lives in the input (scatter in place)
        ranks_[r].output = ranks_[r].input + ownAt_ * 8;
        ranks_[r].outputStorage = ranks_[r].inputStorage;
      }
      if (info_.cost != nullptr) {
        const Cost want = info_.cost(params[r]), got = counted(*ranks_[r].schedule);
        if (want != got) {
          return "rank " + std::to_string(r) + ": the cost formula says " + describe(want) +
                 ", the schedule has " + describe(got);
        }
      }
    }
    std::string error = execute(ranks_, matrix_ ? test::matmulOp() : ReduceOp(kind_), rng);
    if (!error.empty()) return error;
    for (int r = 0; r < P_; ++r) {
      std::string wrong = check(r);
      if (!wrong.empty()) return "rank " + std::to_string(r) + ": " + wrong;
    }
    return "";
  }

  std::string name() const {
    return std::string(collectiveName(info_.coll)) + " " + info_.name + " P=" + std::to_string(P_) +
           " scale " + std::to_string(scale_) + " root " + std::to_string(root_) +
           (inPlace_ ? " in place" : "") + " " + (matrix_ ? "matmul" : reduceOpKindName(kind_)) +
           " chunk " + std::to_string(chunk_);
  }

 private:
  bool variable() const {
    return info_.coll == Collective::kGatherv || info_.coll == Collective::kScatterv ||
           info_.coll == Collective::kAlltoallv ||
           (info_.coll == Collective::kReduceScatter && scale_ % 2 == 1);
  }
  std::vector<std::uint64_t> perRank() const {
    std::vector<std::uint64_t> c(P_);
    for (int i = 0; i < P_; ++i) c[i] = variable() ? ((i * 7 + 3) % 5) * scale_ : scale_;
    return c;
  }
  std::uint64_t a2a(int i, int j) const {
    return info_.coll == Collective::kAlltoallv ? ((i + 2 * j) % 4) * scale_ : scale_;
  }

  // A host layout (ScheduleParams::hostOf) per case, for the hierarchical algorithms (the
  // others ignore it): one host, hosts of 2 (the last of 1 for odd P), hosts of 1, 2, 3,
  // 1, ..., and 3 hosts round robin.
  std::vector<int> hostLayout() const {
    const std::uint64_t kind = (scale_ + static_cast<std::uint64_t>(root_)) % 4;
    if (kind == 0) return {};
    std::vector<int> h(P_);
    int host = 0, used = 0;
    for (int r = 0; r < P_; ++r) {
      if (kind == 1) h[r] = r / 2;
      if (kind == 3) h[r] = r % 3;
      if (kind == 2) {
        if (used == host % 3 + 1) {
          ++host;
          used = 0;
        }
        h[r] = host;
        ++used;
      }
    }
    return h;
  }

  ScheduleParams paramsFor(int r) {
    ScheduleParams p;
    p.coll = info_.coll;
    p.rank = r;
    p.size = P_;
    p.elementSize = 8;
    p.op = matrix_ ? ReduceOpKind::kCustom : kind_;
    p.commutative = !matrix_;
    p.chunkBytes = chunk_;
    p.root = root_;
    p.hostOf = hostLayout();
    if (info_.coll == Collective::kReduceScatter || info_.coll == Collective::kAlltoall ||
        info_.coll == Collective::kAlltoallv) {
      p.root = -1;
    }
    aliased_.resize(P_, -1);
    aliased_[r] = -1;
    const bool isRoot = r == root_;
    auto fill = [&](std::vector<std::int64_t>& v, std::uint64_t n, int who, std::uint64_t first) {
      v.resize(n);
      for (std::uint64_t i = 0; i < n; ++i) v[i] = valueOf(who, first + i);
    };
    switch (info_.coll) {
      case Collective::kAllreduce:
      case Collective::kReduce:
      case Collective::kBroadcast: {
        p.count = scale_;
        const bool here = info_.coll == Collective::kBroadcast ||
                          (inPlace_ && (isRoot || info_.coll == Collective::kAllreduce));
        p.inPlace = here;
        p.root = info_.coll == Collective::kAllreduce ? -1 : root_;
        if (info_.coll == Collective::kBroadcast) {
          outputs_[r].assign(scale_, kPoison);
          if (isRoot) fill(outputs_[r], scale_, r, 0);
          aliased_[r] = 0;
        } else {
          fill(inputs_[r], scale_, r, 0);
          outputs_[r].assign(scale_, kPoison);
          if (here) {
            outputs_[r] = inputs_[r];
            aliased_[r] = 0;
          }
        }
        break;
      }
      case Collective::kReduceScatter: {
        p.counts = perRank();
        p.displs = prefix(p.counts, 0);
        p.count = p.counts[r];
        fill(inputs_[r], std::accumulate(p.counts.begin(), p.counts.end(), std::uint64_t{0}), r, 0);
        outputs_[r].assign(p.counts[r] + 1, kPoison);
        break;
      }
      case Collective::kGather:
      case Collective::kGatherv: {
        const auto counts = perRank();
        const auto displs = prefix(counts, variable() ? 1 : 0);
        p.count = counts[r];
        p.counts = counts;  // collectives.cc passes them everywhere when the caller does
        if (isRoot) p.displs = displs;
        outputs_[r].assign(isRoot ? extent(counts, displs) : 1, kPoison);
        fill(inputs_[r], counts[r], r, 0);
        if (isRoot && inPlace_) {
          p.inPlace = true;
          std::copy(inputs_[r].begin(), inputs_[r].end(),
                    outputs_[r].begin() + static_cast<std::ptrdiff_t>(displs[r]));
          aliased_[r] = static_cast<int>(displs[r]);
        }
        break;
      }
      case Collective::kScatter:
      case Collective::kScatterv: {
        const auto counts = perRank();
        const auto displs = prefix(counts, variable() ? 1 : 0);
        p.count = counts[r];
        p.counts = counts;
        if (isRoot) p.displs = displs;
        outputs_[r].assign(counts[r] + 1, kPoison);
        if (isRoot) {
          inputs_[r].assign(extent(counts, displs), kPoison);
          for (int i = 0; i < P_; ++i) {
            for (std::uint64_t e = 0; e < counts[i]; ++e) inputs_[r][displs[i] + e] = valueOf(i, e);
          }
          if (inPlace_) {
            p.inPlace = true;
            ownAt_ = displs[r];
            aliased_[r] = -2;
          }
        } else {
          inputs_[r].assign(1, kPoison);
        }
        break;
      }
      case Collective::kAlltoall:
      case Collective::kAlltoallv: {
        p.count = info_.coll == Collective::kAlltoall ? scale_ : 0;
        for (int j = 0; j < P_; ++j) {
          p.counts.push_back(a2a(r, j));
          p.recvCounts.push_back(a2a(j, r));
        }
        p.displs = prefix(p.counts, variable() ? 1 : 0);
        p.recvDispls = prefix(p.recvCounts, variable() ? 2 : 0);
        if (info_.coll == Collective::kAlltoallv) {  // as collectives.cc gathers it for bruck
          for (int i = 0; i < P_; ++i) {
            for (int j = 0; j < P_; ++j) p.countMatrix.push_back(a2a(i, j));
          }
        }
        inputs_[r].assign(extent(p.counts, p.displs), kPoison);
        for (int j = 0; j < P_; ++j) {
          for (std::uint64_t e = 0; e < p.counts[j]; ++e)
            inputs_[r][p.displs[j] + e] = valueOf(r * 1000 + j, e);
        }
        outputs_[r].assign(extent(p.recvCounts, p.recvDispls), kPoison);
        break;
      }
      default:
        break;
    }
    if (inputs_[r].empty()) inputs_[r].push_back(kPoison);
    if (outputs_[r].empty()) outputs_[r].push_back(kPoison);
    params_.resize(P_);
    params_[r] = p;
    return p;
  }

  std::string check(int r) {
    const ScheduleParams& p = params_[r];
    const bool isRoot = r == root_;
    std::vector<std::int64_t> want;
    const std::vector<std::int64_t>* got = &outputs_[r];
    switch (info_.coll) {
      case Collective::kAllreduce:
        want = reference(P_, scale_, 0, kind_, matrix_);
        break;
      case Collective::kReduce:
        want = isRoot ? reference(P_, scale_, 0, kind_, matrix_)
                      : std::vector<std::int64_t>(scale_, kPoison);
        for (std::uint64_t i = 0; i < scale_ && !isRoot; ++i) {
          if (inputs_[r][i] != valueOf(r, i)) return "the input changed";
        }
        break;
      case Collective::kBroadcast:
        want.resize(scale_);
        for (std::uint64_t i = 0; i < scale_; ++i) want[i] = valueOf(root_, i);
        break;
      case Collective::kReduceScatter:
        want = reference(P_, p.counts[r], p.displs[r], kind_, matrix_);
        want.push_back(kPoison);
        break;
      case Collective::kGather:
      case Collective::kGatherv:
        if (!isRoot) {
          want = {kPoison};
          break;
        }
        want.assign(outputs_[r].size(), kPoison);
        for (int i = 0; i < P_; ++i) {
          for (std::uint64_t e = 0; e < p.counts[i]; ++e) want[p.displs[i] + e] = valueOf(i, e);
        }
        break;
      case Collective::kScatter:
      case Collective::kScatterv:
        if (isRoot && inPlace_) {  // the block stays where it was; nothing else changes
          want.assign(inputs_[r].size(), kPoison);
          for (int i = 0; i < P_; ++i) {
            for (std::uint64_t e = 0; e < p.counts[i]; ++e) want[p.displs[i] + e] = valueOf(i, e);
          }
          got = &inputs_[r];
          break;
        }
        want.assign(p.counts[r] + 1, kPoison);
        for (std::uint64_t e = 0; e < p.counts[r]; ++e) want[e] = valueOf(r, e);
        break;
      case Collective::kAlltoall:
      case Collective::kAlltoallv:
        want.assign(outputs_[r].size(), kPoison);
        for (int i = 0; i < P_; ++i) {
          for (std::uint64_t e = 0; e < p.recvCounts[i]; ++e)
            want[p.recvDispls[i] + e] = valueOf(i * 1000 + r, e);
        }
        break;
      default:
        return "";
    }
    if (want.empty()) want.push_back(kPoison);
    if (*got == want) return "";
    for (std::size_t i = 0; i < std::min(got->size(), want.size()); ++i) {
      if ((*got)[i] != want[i]) {
        return "element " + std::to_string(i) + " is " + std::to_string((*got)[i]) + ", expected " +
               std::to_string(want[i]);
      }
    }
    return "the output has " + std::to_string(got->size()) + " elements, expected " +
           std::to_string(want.size());
  }

  const AlgorithmInfo& info_;
  int P_;
  std::uint64_t scale_;
  int root_;
  bool inPlace_;
  ReduceOpKind kind_;
  bool matrix_;
  std::uint64_t chunk_;
  std::vector<Rank> ranks_;
  std::vector<std::vector<std::int64_t>> inputs_, outputs_;
  std::vector<ScheduleParams> params_;
  std::vector<int> aliased_;  // >= 0: the input is the output at that element; -2: see run()
  std::uint64_t ownAt_ = 0;
};

bool simulated(Collective coll) {
  return coll != Collective::kBarrier && coll != Collective::kAllgather &&
         coll != Collective::kAllgatherv && coll != Collective::kSendRecv;
}

class AlgorithmSchedules : public ::testing::TestWithParam<int> {};

TEST_P(AlgorithmSchedules, MatchDeliverAndCostWhatTheyClaim) {
  const int P = GetParam();
  std::mt19937 rng(static_cast<std::uint32_t>(P * 7919));
  int cases = 0;
  for (const AlgorithmInfo& info : algorithmRegistry()) {
    if (!simulated(info.coll) || info.shared) continue;
    const bool reducing = reduces(info.coll);
    std::vector<std::uint64_t> scales = {0, 1, static_cast<std::uint64_t>(P > 1 ? P - 1 : 2),
                                         static_cast<std::uint64_t>(2 * P + 3), 301};
    for (std::uint64_t scale : scales) {
      for (int root : {0, P - 1, P / 2}) {
        if (root != 0 &&
            (info.coll == Collective::kAllreduce || info.coll == Collective::kReduceScatter ||
             info.coll == Collective::kAlltoall || info.coll == Collective::kAlltoallv)) {
          continue;
        }
        for (int variant = 0; variant < (reducing ? 3 : 1); ++variant) {
          const bool matrix = variant == 2;
          if (matrix && !info.keepsOrder) continue;
          const ReduceOpKind kind = variant == 1 ? ReduceOpKind::kAvg : ReduceOpKind::kSum;
          const bool inPlace = (scale + static_cast<std::uint64_t>(root + variant)) % 2 == 0;
          // Small pieces exercise the pipelined algorithms (kept to P <= 17 for time).
          const std::uint64_t chunk = scale % 2 == 1 && P <= 17 ? 40 : 1u << 20;
          Case c(info, P, scale, root, inPlace, kind, matrix, chunk);
          const std::string wrong = c.run(rng);
          EXPECT_EQ(wrong, "") << c.name();
          ++cases;
        }
      }
    }
  }
  EXPECT_GT(cases, 0);
}

// gatherv / scatterv pass per-rank counts at the root only unless the caller gives them
// everywhere: a binomial rank that forwards others' blocks cannot build without them, and
// says so, while a leaf needs only its own count.
TEST(AlgorithmSchedules, BinomialGathervAndScattervNeedCountsWhereTheyForward) {
  for (Collective coll : {Collective::kGatherv, Collective::kScatterv}) {
    const AlgorithmInfo* info = findAlgorithm(coll, "binomial");
    ASSERT_NE(info, nullptr);
    ScheduleParams p;
    p.coll = coll;
    p.size = 4;
    p.root = 0;
    p.elementSize = 4;
    p.count = 5;
    p.rank = 2;  // relative rank 2 forwards rank 3's block
    try {
      info->build(p);
      ADD_FAILURE() << collectiveName(coll) << ": rank 2 built without counts";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("needs"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("on every rank"), std::string::npos) << e.what();
    }
    p.rank = 3;  // a leaf
    const Schedule leaf = info->build(p);
    ASSERT_EQ(leaf.tasks().size(), 1u);
    EXPECT_EQ(leaf.tasks()[0].bytes, 20u);
    p.rank = 2;
    p.counts = {1, 2, 4, 5};  // rank 2's own count is 5, not 4
    EXPECT_THROW(info->build(p), InvalidArgument) << collectiveName(coll);
  }
}

// A reduce_scatter whose every count is 0 (4 bytes at P = 4 is 0 elements per rank) sends
// nothing with either algorithm: every rank knows all counts, so none waits for a message.
TEST(AlgorithmSchedules, ReduceScatterOfNothingSendsNothing) {
  for (const char* name : {"ring", "recursive_halving"}) {
    const AlgorithmInfo* info = findAlgorithm(Collective::kReduceScatter, name);
    ASSERT_NE(info, nullptr) << name;
    for (int P : {2, 3, 4, 6}) {
      for (int r = 0; r < P; ++r) {
        ScheduleParams p;
        p.coll = Collective::kReduceScatter;
        p.size = P;
        p.rank = r;
        p.elementSize = 4;
        p.counts.assign(static_cast<std::size_t>(P), 0);
        p.displs.assign(static_cast<std::size_t>(P), 0);
        const Schedule s = info->build(p);
        EXPECT_TRUE(s.tasks().empty()) << name << " P=" << P << " rank " << r;
        const Cost c = info->cost(p);
        EXPECT_EQ(c.sends + c.recvs, 0u) << name << " P=" << P << " rank " << r;
      }
    }
  }
}

// ring_chunked moves each segment in 2 pieces up to 512 KiB a segment, and above in pieces
// of at most 256 KiB (the eager limit), as many as it takes; its cost counts them alike.
TEST(AlgorithmSchedules, RingChunkedPiecesStayWithinTheEagerLimit) {
  const AlgorithmInfo* info = findAlgorithm(Collective::kAllreduce, "ring_chunked");
  ASSERT_NE(info, nullptr);
  struct Want {
    int P;
    std::uint64_t bytes, sends, largest;
  };
  // P = 2: 1 MiB is 2 segments of 2 pieces of 256 KiB, sent twice (reduce-scatter and
  // allgather) for one of the 2 segments each: 4 sends; 4 MiB: 8 pieces a segment, 16 sends;
  // 4 MiB + 8 B: segments of 2 MiB + 4 B, 9 pieces each (the last of 4 B), 18 sends; 1000 B:
  // pieces of 63 elements.
  for (const Want& w : {Want{2, 1 << 20, 4, 256 * 1024}, Want{2, 4 << 20, 16, 256 * 1024},
                        Want{2, (4 << 20) + 8, 18, 256 * 1024}, Want{2, 1000, 4, 252},
                        Want{4, 4 << 20, 3 * 4 * 2, 256 * 1024}}) {
    for (int r = 0; r < w.P; ++r) {
      ScheduleParams p;
      p.coll = Collective::kAllreduce;
      p.size = w.P;
      p.rank = r;
      p.elementSize = 4;
      p.count = w.bytes / 4;
      const Schedule s = info->build(p);
      std::uint64_t sends = 0, largest = 0, sent = 0;
      for (const Task& t : s.tasks()) {
        if (t.kind != TaskKind::kSend) continue;
        ++sends;
        sent += t.bytes;
        largest = std::max(largest, t.bytes);
      }
      const std::string at = "P=" + std::to_string(w.P) + " " + std::to_string(w.bytes) +
                             " bytes, rank " + std::to_string(r);
      EXPECT_LE(largest, w.largest) << at;
      EXPECT_EQ(sends, info->cost(p).sends) << at;
      EXPECT_EQ(sent, info->cost(p).sendBytes) << at;
      EXPECT_EQ(sends, w.sends) << at;
    }
  }
}

// Every call finds a registered default, and the v-collectives whose ranks pass different
// bytes (gatherv, scatterv, alltoallv) get one whatever the bytes, or ranks could choose
// different algorithms (allgatherv's rows see the whole buffer, which every rank knows).
TEST(AlgorithmSchedules, TheDefaultTableNamesRegisteredAlgorithmsAgreedByEveryRank) {
  for (Collective coll : collectives()) {
    for (int P : kSizes) {
      const char* first = nullptr;
      for (std::uint64_t bytes = 0; bytes <= (std::uint64_t{1} << 32); bytes = bytes * 2 + 1) {
        const Selection::Row* row = Selection::builtIn().choose(coll, P, bytes);
        const char* name = row == nullptr ? nullptr : row->algorithm->name;
        ASSERT_NE(name, nullptr) << collectiveName(coll) << " P=" << P << " " << bytes;
        EXPECT_NE(findAlgorithm(coll, name), nullptr) << collectiveName(coll) << " " << name;
        if (first == nullptr) first = name;
        if (coll == Collective::kGatherv || coll == Collective::kScatterv ||
            coll == Collective::kAlltoallv) {
          EXPECT_STREQ(name, first) << collectiveName(coll) << " P=" << P << " " << bytes;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, AlgorithmSchedules, ::testing::ValuesIn(kSizes),
                         [](const auto& p) { return "P" + std::to_string(p.param); });

}  // namespace
}  // namespace collx::algorithms
