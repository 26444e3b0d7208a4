#include "collx/algorithms/simulator.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "collx/algorithms/reduce.h"
#include "collx/base/error.h"

namespace collx::algorithms {

namespace {

constexpr std::uint32_t kNone = ~std::uint32_t{0};
constexpr int kMaxRanks = 1 << 16;        // (dst, src) pairs fit in 32 bits of a channel key
constexpr std::size_t kMaxProblems = 32;  // per kind; the rest are summed up in one line

// One task, compact: at P = 1024 a ring allreduce has millions of them.
struct SimTask {
  std::uint64_t size = 0;            // bytes (send, recv, copy) or elements (reduce, divide)
  std::uint32_t firstDependent = 0;  // into Simulation::dependents_ (global task ids)
  std::uint32_t dependentCount = 0;
  std::uint32_t remaining = 0;  // dependencies not yet done
  std::uint32_t step = 0;
  std::int32_t peer = -1;
  std::int32_t rank = 0;
  std::uint32_t depth = 0;  // messages on the longest path that ends at this task
  TaskKind kind = TaskKind::kCopy;
  bool posted = false;
  bool done = false;
};

// Where a task reads and writes; kept only when bytes move.
struct Refs {
  BufferRef dst, src, a;
};

struct RankState {
  std::uint32_t firstTask = 0;
  std::uint32_t taskCount = 0;
  std::uint32_t doneCount = 0;
  std::uint64_t elementSize = 1;
  double cpuFree = 0;  // the rank's CPU: reductions one after the other
  double outFree = 0;  // its outgoing link
  double inFree = 0;   // its incoming link
  SimBuffers buffers;
  std::vector<std::uint8_t> scratch;
  std::uint64_t scratchBytes = 0;
  SimRankResult result;
};

// A message from its send's posting until both sides completed.
struct Message {
  std::uint32_t sendTask = kNone;  // global task ids
  std::uint32_t recvTask = kNone;
  double injected = 0;  // its bytes left the sender
  double arrival = -1;  // < 0 until it departed
  double matched = -1;  // < 0 until its receive was posted
  std::uint32_t depth = 0;
};

// The unmatched sends (message ids) and posted receives (task ids) of one (dst, src, step).
struct Channel {
  std::vector<std::uint32_t> sends, recvs;
  std::size_t sendHead = 0, recvHead = 0;
  bool empty() const { return sendHead == sends.size() && recvHead == recvs.size(); }
};

enum class EventKind : std::uint8_t { kDone, kDepart };

struct Event {
  double time;
  std::uint64_t seq;  // ties: first pushed, first processed (determinism)
  std::uint32_t id;   // task (kDone) or message (kDepart)
  EventKind kind;
  bool operator>(const Event& o) const { return time != o.time ? time > o.time : seq > o.seq; }
};

const char* kindName(TaskKind kind) {
  switch (kind) {
    case TaskKind::kSend:
      return "send";
    case TaskKind::kRecv:
      return "recv";
    case TaskKind::kReduce:
      return "reduce";
    case TaskKind::kCopy:
      return "copy";
    case TaskKind::kDivide:
      return "divide";
    case TaskKind::kShared:
      return "shared";
  }
  return "task";
}

const char* bufferName(Buffer b) {
  switch (b) {
    case Buffer::kInput:
      return "input";
    case Buffer::kOutput:
      return "output";
    case Buffer::kScratch:
      return "scratch";
  }
  return "buffer";
}

class Simulation {
 public:
  Simulation(int size, const SimOptions& options) : size_(size), options_(options) {
    ranks_.resize(static_cast<std::size_t>(size));
  }

  void addRank(int rank, Schedule schedule, SimBuffers buffers, std::uint64_t elementSize) {
    schedule.finalize();
    RankState& rs = ranks_[static_cast<std::size_t>(rank)];
    const auto& tasks = schedule.tasks();
    const auto& dependents = schedule.dependents();
    if (tasks_.size() + tasks.size() >= kNone || dependents_.size() + dependents.size() >= kNone) {
      throw InvalidArgument(Where{rank, "simulate", -1},
                            "more than 2^32 tasks or dependencies over all ranks");
    }
    if (schedule.sharedParams() != nullptr) {
      throw InvalidArgument(Where{rank, "simulate", -1},
                            "the schedule works on shared memory (a kShared task): nothing to "
                            "simulate");
    }
    if (rank == 0) {
      // Ranks mostly run alike: one reservation instead of a doubling vector of gigabytes.
      const std::size_t expected = tasks.size() * static_cast<std::size_t>(size_);
      tasks_.reserve(expected);
      dependents_.reserve(dependents.size() * static_cast<std::size_t>(size_));
      if (options_.moveBytes) refs_.reserve(expected);
    }
    rs.firstTask = static_cast<std::uint32_t>(tasks_.size());
    rs.taskCount = static_cast<std::uint32_t>(tasks.size());
    rs.elementSize = elementSize;
    rs.scratchBytes = schedule.scratchBytes();
    const std::uint32_t base = rs.firstTask;
    const std::uint32_t depBase = static_cast<std::uint32_t>(dependents_.size());
    for (TaskId d : dependents) dependents_.push_back(base + d);
    Cost& cost = rs.result.cost;
    for (const Task& t : tasks) {
      SimTask s;
      s.kind = t.kind;
      s.peer = t.peer;
      s.step = t.step;
      s.rank = rank;
      s.remaining = t.depCount;
      s.firstDependent = depBase + t.firstDependent;
      s.dependentCount = t.dependentCount;
      switch (t.kind) {
        case TaskKind::kSend:
          s.size = t.bytes;
          ++cost.sends;
          cost.sendBytes += t.bytes;
          break;
        case TaskKind::kRecv:
          s.size = t.bytes;
          ++cost.recvs;
          cost.recvBytes += t.bytes;
          break;
        case TaskKind::kReduce:
          s.size = t.count;
          cost.reducedElements += t.count;
          break;
        case TaskKind::kCopy:
          s.size = t.bytes;
          break;
        case TaskKind::kDivide:
          s.size = t.count;
          break;
        case TaskKind::kShared:  // refused above
          break;
      }
      tasks_.push_back(s);
      if (options_.moveBytes) refs_.push_back(Refs{t.dst, t.src, t.a});
    }
    if (options_.moveBytes) {
      rs.buffers = std::move(buffers);
      // Only what the tasks touch (checkBounds() holds them to the declared size): some
      // schedules declare more than they use. Filled with garbage that a schedule reading
      // scratch before writing it would show.
      std::uint64_t used = 0;
      for (const Task& t : tasks) {
        const std::uint64_t n = t.kind == TaskKind::kReduce || t.kind == TaskKind::kDivide
                                    ? t.count * elementSize
                                    : t.bytes;
        for (const BufferRef* ref : {&t.dst, &t.src, &t.a}) {
          if (ref->buffer == Buffer::kScratch && n > 0) used = std::max(used, ref->offset + n);
        }
      }
      rs.scratch.assign(std::min(used, rs.scratchBytes), 0xCD);
    }
  }

  SimResult run() {
    checkPeers();
    if (options_.moveBytes) checkBounds();
    if (problems_.empty()) {
      for (std::uint32_t id = 0; id < tasks_.size(); ++id) {
        if (tasks_[id].remaining == 0) post(id);
      }
      while (!events_.empty()) {
        Event e = events_.top();
        events_.pop();
        now_ = e.time;
        if (e.kind == EventKind::kDone) {
          complete(e.id);
        } else {
          depart(e.id);
        }
      }
      diagnose();
    }
    return finish();
  }

 private:
  std::uint64_t channelKey(int dst, int src, std::uint32_t step) const {
    return ((static_cast<std::uint64_t>(dst) * static_cast<std::uint64_t>(size_) +
             static_cast<std::uint64_t>(src))
            << 32) |
           step;
  }

  void push(double time, std::uint32_t id, EventKind kind) {
    events_.push(Event{time, seq_++, id, kind});
  }

  void addProblem(SimProblemKind kind, int rank, int peer, std::uint32_t step, std::string detail) {
    std::size_t& n = problemCounts_[static_cast<std::size_t>(kind)];
    if (++n > kMaxProblems) return;
    problems_.push_back(SimProblem{kind, rank, peer, step, std::move(detail)});
  }

  std::string describeTask(const SimTask& t) const {
    return std::string(kindName(t.kind)) + (t.kind == TaskKind::kSend ? " to" : " from") +
           " rank " + std::to_string(t.peer) + " (step " + std::to_string(t.step) + ", " +
           std::to_string(t.size) + " bytes)";
  }

  void checkPeers() {
    for (const SimTask& t : tasks_) {
      if ((t.kind == TaskKind::kSend || t.kind == TaskKind::kRecv) &&
          (t.peer < 0 || t.peer >= size_)) {
        addProblem(SimProblemKind::kBadPeer, t.rank, t.peer, t.step,
                   "rank " + std::to_string(t.rank) + " posts a " + describeTask(t) +
                       " outside the world of " + std::to_string(size_) + " ranks");
      }
    }
  }

  std::uint64_t bufferSize(const RankState& rs, Buffer b) const {
    switch (b) {
      case Buffer::kInput:
        if (rs.buffers.inputInOutput) {
          const std::uint64_t off = *rs.buffers.inputInOutput;
          return off <= rs.buffers.output.size() ? rs.buffers.output.size() - off : 0;
        }
        return rs.buffers.input.size();
      case Buffer::kOutput:
        return rs.buffers.output.size();
      case Buffer::kScratch:
        return rs.scratchBytes;
    }
    return 0;
  }

  void checkRange(const RankState& rs, std::uint32_t id, const BufferRef& ref,
                  std::uint64_t bytes) {
    if (bytes == 0) return;
    const std::uint64_t size = bufferSize(rs, ref.buffer);
    if (ref.offset <= size && bytes <= size - ref.offset) return;
    const SimTask& t = tasks_[id];
    addProblem(SimProblemKind::kOutOfBounds, t.rank, t.peer, t.step,
               "rank " + std::to_string(t.rank) + " task " + std::to_string(id - rs.firstTask) +
                   " (" + kindName(t.kind) + ") uses " + bufferName(ref.buffer) + " bytes [" +
                   std::to_string(ref.offset) + ", " + std::to_string(ref.offset + bytes) +
                   ") of a " + std::to_string(size) + "-byte buffer");
  }

  void checkBounds() {
    for (const RankState& rs : ranks_) {
      for (std::uint32_t id = rs.firstTask; id < rs.firstTask + rs.taskCount; ++id) {
        const SimTask& t = tasks_[id];
        const Refs& r = refs_[id];
        const std::uint64_t elems = t.size * rs.elementSize;
        switch (t.kind) {
          case TaskKind::kSend:
            checkRange(rs, id, r.src, t.size);
            break;
          case TaskKind::kRecv:
            checkRange(rs, id, r.dst, t.size);
            break;
          case TaskKind::kCopy:
            checkRange(rs, id, r.dst, t.size);
            checkRange(rs, id, r.src, t.size);
            break;
          case TaskKind::kReduce:
            checkRange(rs, id, r.dst, elems);
            checkRange(rs, id, r.a, elems);
            checkRange(rs, id, r.src, elems);
            break;
          case TaskKind::kDivide:
            checkRange(rs, id, r.dst, elems);
            break;
          case TaskKind::kShared:
            break;
        }
      }
    }
  }

  std::uint8_t* pointer(RankState& rs, const BufferRef& ref) {
    switch (ref.buffer) {
      case Buffer::kInput:
        if (rs.buffers.inputInOutput) {
          return rs.buffers.output.data() + *rs.buffers.inputInOutput + ref.offset;
        }
        return rs.buffers.input.data() + ref.offset;
      case Buffer::kOutput:
        return rs.buffers.output.data() + ref.offset;
      case Buffer::kScratch:
        return rs.scratch.data() + ref.offset;
    }
    return nullptr;
  }

  // The task's dependencies are done: run it (local work) or post it (communication).
  void post(std::uint32_t id) {
    SimTask& t = tasks_[id];
    t.posted = true;
    RankState& rs = ranks_[static_cast<std::size_t>(t.rank)];
    const TimeModel& m = options_.model;
    switch (t.kind) {
      case TaskKind::kSend: {
        const std::uint32_t msg = newMessage();
        Message& mm = messages_[msg];
        mm.sendTask = id;
        mm.depth = t.depth;
        const double start = std::max(now_, rs.outFree);
        mm.injected = start + m.alpha + static_cast<double>(t.size) * m.beta;
        rs.outFree = mm.injected;
        push(start, msg, EventKind::kDepart);
        Channel& ch = channels_[channelKey(t.peer, t.rank, t.step)];
        if (ch.recvHead < ch.recvs.size()) {
          const std::uint32_t recv = ch.recvs[ch.recvHead++];
          releaseIfEmpty(channelKey(t.peer, t.rank, t.step), ch);
          match(msg, recv);
        } else {
          ch.sends.push_back(msg);
        }
        break;
      }
      case TaskKind::kRecv: {
        const std::uint64_t key = channelKey(t.rank, t.peer, t.step);
        Channel& ch = channels_[key];
        if (ch.sendHead < ch.sends.size()) {
          const std::uint32_t msg = ch.sends[ch.sendHead++];
          releaseIfEmpty(key, ch);
          match(msg, id);
        } else {
          ch.recvs.push_back(id);
        }
        break;
      }
      case TaskKind::kReduce:
      case TaskKind::kCopy:
      case TaskKind::kDivide: {
        const double start = std::max(now_, rs.cpuFree);
        double cost = 0;
        if (t.kind != TaskKind::kCopy) {
          cost = static_cast<double>(t.size * rs.elementSize) * m.gamma;
        }
        rs.cpuFree = start + cost;
        if (options_.moveBytes) runLocal(rs, t, refs_[id]);
        push(start + cost, id, EventKind::kDone);
        break;
      }
      case TaskKind::kShared:  // refused by addRank
        break;
    }
  }

  void runLocal(RankState& rs, const SimTask& t, const Refs& r) {
    switch (t.kind) {
      case TaskKind::kCopy:
        if (t.size > 0 && pointer(rs, r.dst) != pointer(rs, r.src)) {
          std::memmove(pointer(rs, r.dst), pointer(rs, r.src), t.size);
        }
        break;
      case TaskKind::kReduce:
        reduce(pointer(rs, r.dst), pointer(rs, r.a), pointer(rs, r.src), t.size, options_.dtype,
               options_.op);
        break;
      case TaskKind::kDivide:
        divideBy(pointer(rs, r.dst), t.size, options_.dtype, static_cast<std::uint64_t>(size_));
        break;
      default:
        break;
    }
  }

  void releaseIfEmpty(std::uint64_t key, Channel& ch) {
    if (ch.empty()) channels_.erase(key);
  }

  std::uint32_t newMessage() {
    if (!freeMessages_.empty()) {
      std::uint32_t id = freeMessages_.back();
      freeMessages_.pop_back();
      messages_[id] = Message{};
      return id;
    }
    messages_.emplace_back();
    return static_cast<std::uint32_t>(messages_.size() - 1);
  }

  // A send met its receive (the later of the two was posted just now).
  void match(std::uint32_t msgId, std::uint32_t recvId) {
    Message& msg = messages_[msgId];
    msg.recvTask = recvId;
    msg.matched = now_;
    const SimTask& send = tasks_[msg.sendTask];
    const SimTask& recv = tasks_[recvId];
    if (send.size != recv.size) {
      addProblem(SimProblemKind::kLengthMismatch, recv.rank, send.rank, send.step,
                 "rank " + std::to_string(recv.rank) + " receives " + std::to_string(recv.size) +
                     " bytes from rank " + std::to_string(send.rank) + " at step " +
                     std::to_string(send.step) + ", which sends " + std::to_string(send.size));
    }
    if (options_.moveBytes) {
      const std::uint64_t n = std::min(send.size, recv.size);
      if (n > 0) {
        std::memmove(pointer(ranks_[static_cast<std::size_t>(recv.rank)], refs_[recvId].dst),
                     pointer(ranks_[static_cast<std::size_t>(send.rank)], refs_[msg.sendTask].src),
                     n);
      }
    }
    push(std::max(msg.injected, now_), msg.sendTask, EventKind::kDone);
    if (msg.arrival >= 0) deliver(msgId);
  }

  void depart(std::uint32_t msgId) {
    Message& msg = messages_[msgId];
    const SimTask& send = tasks_[msg.sendTask];
    if (options_.model.serializeIncoming) {
      RankState& dst = ranks_[static_cast<std::size_t>(send.peer)];
      const double start = std::max(now_, dst.inFree);
      msg.arrival =
          start + options_.model.alpha + static_cast<double>(send.size) * options_.model.beta;
      dst.inFree = msg.arrival;
    } else {
      msg.arrival = msg.injected;
    }
    if (msg.matched >= 0) deliver(msgId);
  }

  // Both sides are known and the bytes are on their way: the receive completes on arrival.
  void deliver(std::uint32_t msgId) {
    Message& msg = messages_[msgId];
    SimTask& recv = tasks_[msg.recvTask];
    recv.depth = std::max(recv.depth, msg.depth + 1);
    push(std::max(msg.arrival, msg.matched), msg.recvTask, EventKind::kDone);
    freeMessages_.push_back(msgId);
  }

  void complete(std::uint32_t id) {
    SimTask& t = tasks_[id];
    t.done = true;
    RankState& rs = ranks_[static_cast<std::size_t>(t.rank)];
    ++rs.doneCount;
    rs.result.finish = std::max(rs.result.finish, now_);
    rs.result.rounds = std::max<std::uint64_t>(rs.result.rounds, t.depth);
    for (std::uint32_t i = 0; i < t.dependentCount; ++i) {
      SimTask& d = tasks_[dependents_[t.firstDependent + i]];
      d.depth = std::max(d.depth, t.depth);
      if (--d.remaining == 0) post(dependents_[t.firstDependent + i]);
    }
  }

  // After the loop: who could not finish, and why.
  void diagnose() {
    std::vector<int> stuck;
    for (int r = 0; r < size_; ++r) {
      if (ranks_[static_cast<std::size_t>(r)].doneCount <
          ranks_[static_cast<std::size_t>(r)].taskCount)
        stuck.push_back(r);
    }
    if (stuck.empty()) return;
    // Unmatched: a posted send or receive whose peer has no counterpart left to post.
    bool unmatched = false;
    for (const auto& [key, ch] : channels_) {
      for (std::size_t i = ch.sendHead; i < ch.sends.size(); ++i) {
        const SimTask& t = tasks_[messages_[ch.sends[i]].sendTask];
        if (!peerWillPost(t.peer, TaskKind::kRecv, t.rank, t.step)) {
          unmatched = true;
          addProblem(SimProblemKind::kUnmatched, t.rank, t.peer, t.step,
                     "rank " + std::to_string(t.rank) + " sends " + std::to_string(t.size) +
                         " bytes to rank " + std::to_string(t.peer) + " at step " +
                         std::to_string(t.step) + " that rank " + std::to_string(t.peer) +
                         " never receives (a leftover message)");
        }
      }
      for (std::size_t i = ch.recvHead; i < ch.recvs.size(); ++i) {
        const SimTask& t = tasks_[ch.recvs[i]];
        if (!peerWillPost(t.peer, TaskKind::kSend, t.rank, t.step)) {
          unmatched = true;
          addProblem(SimProblemKind::kUnmatched, t.rank, t.peer, t.step,
                     "rank " + std::to_string(t.rank) + " expects " + std::to_string(t.size) +
                         " bytes from rank " + std::to_string(t.peer) + " at step " +
                         std::to_string(t.step) + " that rank " + std::to_string(t.peer) +
                         " never sends");
        }
      }
    }
    if (unmatched) return;
    // A deadlock: follow each stuck rank's first pending send or receive to the rank it
    // waits for until a rank repeats; the repeated part is the cycle.
    std::unordered_map<int, std::uint32_t> waitsOn;  // rank -> its first pending task
    for (int r : stuck) {
      const RankState& rs = ranks_[static_cast<std::size_t>(r)];
      for (std::uint32_t id = rs.firstTask; id < rs.firstTask + rs.taskCount; ++id) {
        const SimTask& t = tasks_[id];
        if (t.posted && !t.done) {
          waitsOn[r] = id;
          break;
        }
      }
    }
    std::vector<int> path;
    std::unordered_map<int, std::size_t> seen;
    int r = stuck.front();
    while (waitsOn.count(r) != 0 && seen.count(r) == 0) {
      seen[r] = path.size();
      path.push_back(r);
      r = tasks_[waitsOn[r]].peer;
    }
    std::string detail;
    const std::size_t from = seen.count(r) != 0 ? seen[r] : 0;
    for (std::size_t i = from; i < path.size(); ++i) {
      const SimTask& t = tasks_[waitsOn[path[i]]];
      if (!detail.empty()) detail += ", ";
      detail += "rank " + std::to_string(t.rank) + " waits in " + describeTask(t);
    }
    detail = "deadlock: " + detail + "; " + std::to_string(stuck.size()) + " of " +
             std::to_string(size_) + " ranks cannot finish";
    const SimTask& first = tasks_[waitsOn[path[from]]];
    addProblem(SimProblemKind::kDeadlock, first.rank, first.peer, first.step, std::move(detail));
  }

  // Whether `rank` still has an unposted task of `kind` with (peer, step).
  bool peerWillPost(int rank, TaskKind kind, int peer, std::uint32_t step) {
    auto it = unposted_.find(rank);
    if (it == unposted_.end()) {
      std::unordered_multiset<std::uint64_t> set;
      const RankState& rs = ranks_[static_cast<std::size_t>(rank)];
      for (std::uint32_t id = rs.firstTask; id < rs.firstTask + rs.taskCount; ++id) {
        const SimTask& t = tasks_[id];
        if (!t.posted && (t.kind == TaskKind::kSend || t.kind == TaskKind::kRecv)) {
          set.insert(unpostedKey(t.kind, t.peer, t.step));
        }
      }
      it = unposted_.emplace(rank, std::move(set)).first;
    }
    return it->second.count(unpostedKey(kind, peer, step)) != 0;
  }

  static std::uint64_t unpostedKey(TaskKind kind, int peer, std::uint32_t step) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(peer)) << 33) |
           (static_cast<std::uint64_t>(step) << 1) | (kind == TaskKind::kSend ? 1 : 0);
  }

  SimResult finish() {
    SimResult out;
    for (std::size_t k = 0; k < problemCounts_.size(); ++k) {
      if (problemCounts_[k] > kMaxProblems) {
        out.problems.push_back(
            SimProblem{static_cast<SimProblemKind>(k), -1, -1, 0,
                       "and " + std::to_string(problemCounts_[k] - kMaxProblems) + " more " +
                           simProblemKindName(static_cast<SimProblemKind>(k)) + " problems"});
      }
    }
    out.problems.insert(out.problems.begin(), problems_.begin(), problems_.end());
    out.ranks.reserve(ranks_.size());
    for (RankState& rs : ranks_) {
      rs.result.finished = rs.doneCount == rs.taskCount;
      if (options_.moveBytes) rs.result.output = std::move(rs.buffers.output);
      out.seconds = std::max(out.seconds, rs.result.finish);
      out.rounds = std::max(out.rounds, rs.result.rounds);
      out.messages += rs.result.cost.sends;
      out.bytes += rs.result.cost.sendBytes;
      out.ranks.push_back(std::move(rs.result));
    }
    return out;
  }

  const int size_;
  const SimOptions options_;
  std::vector<RankState> ranks_;
  std::vector<SimTask> tasks_;
  std::vector<Refs> refs_;
  std::vector<std::uint32_t> dependents_;
  std::vector<Message> messages_;
  std::vector<std::uint32_t> freeMessages_;
  std::unordered_map<std::uint64_t, Channel> channels_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  std::unordered_map<int, std::unordered_multiset<std::uint64_t>> unposted_;
  std::vector<SimProblem> problems_;
  std::array<std::size_t, 5> problemCounts_{};
  double now_ = 0;
  std::uint64_t seq_ = 0;
};

void checkSize(int size) {
  if (size < 1 || size > kMaxRanks) {
    throw InvalidArgument(Where{-1, "simulate", -1}, "the world size must be in [1, " +
                                                         std::to_string(kMaxRanks) + "], got " +
                                                         std::to_string(size));
  }
}

}  // namespace

const char* simProblemKindName(SimProblemKind kind) noexcept {
  switch (kind) {
    case SimProblemKind::kBadPeer:
      return "bad peer";
    case SimProblemKind::kOutOfBounds:
      return "out of bounds";
    case SimProblemKind::kUnmatched:
      return "unmatched";
    case SimProblemKind::kLengthMismatch:
      return "length mismatch";
    case SimProblemKind::kDeadlock:
      return "deadlock";
  }
  return "problem";
}

std::string SimResult::describeProblems() const {
  std::string out;
  for (const SimProblem& p : problems) {
    out += std::string(simProblemKindName(p.kind)) + ": " + p.detail + "\n";
  }
  return out;
}

// The per-rank vectors the collective's builders index by rank (collectives.cc fills them):
// missing ones are an InvalidArgument here, not a read past their end.
void checkShape(const ScheduleParams& p, const Where& where) {
  const auto P = static_cast<std::size_t>(p.size);
  auto need = [&](const std::vector<std::uint64_t>& v, const char* name) {
    if (v.size() != P) {
      throw InvalidArgument(where, std::string(name) + " has " + std::to_string(v.size()) +
                                       " entries for " + std::to_string(P) + " ranks");
    }
  };
  const bool root = p.rank == p.root;
  switch (p.coll) {
    case Collective::kReduceScatter:
      need(p.counts, "counts");
      need(p.displs, "displs");
      break;
    case Collective::kAllgatherv:
      need(p.counts, "counts");
      break;
    case Collective::kAlltoallv:
      need(p.counts, "counts");
      need(p.displs, "displs");
      need(p.recvCounts, "recvCounts");
      need(p.recvDispls, "recvDispls");
      break;
    case Collective::kGatherv:
    case Collective::kScatterv:
      if (root) {
        need(p.counts, "counts");
        need(p.displs, "displs");
      } else if (!p.counts.empty()) {
        need(p.counts, "counts");
      }
      break;
    default:
      break;
  }
}

SimResult simulate(const AlgorithmInfo& algorithm, int size, const ParamsOf& paramsOf,
                   const BuffersOf& buffersOf, const SimOptions& options) {
  checkSize(size);
  const std::string what =
      std::string("simulate ") + collectiveName(algorithm.coll) + " " + algorithm.name;
  if (options.moveBytes && !buffersOf) {
    throw InvalidArgument(Where{-1, what, -1}, "moving bytes needs every rank's buffers");
  }
  if (algorithm.shared) {
    throw InvalidArgument(Where{-1, what, -1},
                          "works on shared memory, not through a schedule: nothing to simulate");
  }
  Simulation sim(size, options);
  for (int r = 0; r < size; ++r) {
    ScheduleParams params = paramsOf(r);
    if (params.rank != r || params.size != size || params.coll != algorithm.coll) {
      throw InvalidArgument(Where{r, what, -1}, "the params of rank " + std::to_string(r) +
                                                    " say rank " + std::to_string(params.rank) +
                                                    " of " + std::to_string(params.size) +
                                                    ", collective " + collectiveName(params.coll));
    }
    if (params.op != options.op.kind()) {
      throw InvalidArgument(Where{r, what, -1},
                            std::string("the params reduce with ") + reduceOpKindName(params.op) +
                                ", the options with " + reduceOpKindName(options.op.kind()));
    }
    if (options.moveBytes && params.elementSize != dataTypeSize(options.dtype)) {
      throw InvalidArgument(Where{r, what, -1},
                            "element size " + std::to_string(params.elementSize) + " is not " +
                                dataTypeName(options.dtype) + "'s");
    }
    checkShape(params, Where{r, what, -1});
    sim.addRank(r, algorithm.build(params), options.moveBytes ? buffersOf(r) : SimBuffers{},
                params.elementSize);
  }
  return sim.run();
}

SimResult simulate(const AlgorithmInfo& algorithm, const ScheduleParams& params,
                   const BuffersOf& buffersOf, const SimOptions& options) {
  return simulate(
      algorithm, params.size,
      [&](int rank) {
        ScheduleParams p = params;
        p.rank = rank;
        return p;
      },
      buffersOf, options);
}

SimResult simulateSchedules(std::vector<Schedule> schedules, std::vector<SimBuffers> buffers,
                            const SimOptions& options) {
  const int size = static_cast<int>(schedules.size());
  checkSize(size);
  if (options.moveBytes && buffers.size() != schedules.size()) {
    throw InvalidArgument(
        Where{-1, "simulate", -1},
        std::to_string(buffers.size()) + " buffers for " + std::to_string(size) + " ranks");
  }
  Simulation sim(size, options);
  for (int r = 0; r < size; ++r) {
    sim.addRank(r, std::move(schedules[static_cast<std::size_t>(r)]),
                options.moveBytes ? std::move(buffers[static_cast<std::size_t>(r)]) : SimBuffers{},
                dataTypeSize(options.dtype));
  }
  return sim.run();
}

}  // namespace collx::algorithms
