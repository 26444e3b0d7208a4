#include "collx/algorithms/schedule.h"

#include "collx/algorithms/registry.h"
#include "collx/base/check.h"

namespace collx::algorithms {

TaskId Schedule::add(Task task, Deps deps) {
  COLLX_CHECK(!finalized_);
  TaskId id = static_cast<TaskId>(tasks_.size());
  for (TaskId dep : deps) COLLX_CHECK_LT(dep, id);
  task.depCount = static_cast<std::uint32_t>(deps.size());
  tasks_.push_back(task);
  depsOf_.push_back(std::move(deps));
  return id;
}

TaskId Schedule::send(int peer, std::uint32_t step, BufferRef src, std::uint64_t bytes, Deps deps) {
  Task t;
  t.kind = TaskKind::kSend;
  t.peer = peer;
  t.step = step;
  t.src = src;
  t.bytes = bytes;
  return add(t, std::move(deps));
}

TaskId Schedule::recv(int peer, std::uint32_t step, BufferRef dst, std::uint64_t bytes, Deps deps) {
  Task t;
  t.kind = TaskKind::kRecv;
  t.peer = peer;
  t.step = step;
  t.dst = dst;
  t.bytes = bytes;
  return add(t, std::move(deps));
}

TaskId Schedule::reduce(BufferRef dst, BufferRef a, BufferRef b, std::uint64_t count, Deps deps) {
  Task t;
  t.kind = TaskKind::kReduce;
  t.dst = dst;
  t.a = a;
  t.src = b;
  t.count = count;
  return add(t, std::move(deps));
}

TaskId Schedule::copy(BufferRef dst, BufferRef src, std::uint64_t bytes, Deps deps) {
  Task t;
  t.kind = TaskKind::kCopy;
  t.dst = dst;
  t.src = src;
  t.bytes = bytes;
  return add(t, std::move(deps));
}

TaskId Schedule::divide(BufferRef dst, std::uint64_t count, Deps deps) {
  Task t;
  t.kind = TaskKind::kDivide;
  t.dst = dst;
  t.count = count;
  return add(t, std::move(deps));
}

TaskId Schedule::shared(std::shared_ptr<const ScheduleParams> params, Deps deps) {
  COLLX_CHECK(sharedParams_ == nullptr);
  sharedParams_ = std::move(params);
  Task t;
  t.kind = TaskKind::kShared;
  return add(t, std::move(deps));
}

void Schedule::mapPeers(const std::vector<int>& ranks) {
  for (Task& t : tasks_) {
    if (t.kind == TaskKind::kSend || t.kind == TaskKind::kRecv) {
      t.peer = ranks.at(static_cast<std::size_t>(t.peer));
    }
  }
}

void Schedule::finalize() {
  if (finalized_) return;
  std::vector<std::vector<TaskId>> dependentsOf(tasks_.size());
  for (TaskId id = 0; id < tasks_.size(); ++id) {
    for (TaskId dep : depsOf_[id]) dependentsOf[dep].push_back(id);
  }
  dependents_.clear();
  for (TaskId id = 0; id < tasks_.size(); ++id) {
    tasks_[id].firstDependent = static_cast<std::uint32_t>(dependents_.size());
    tasks_[id].dependentCount = static_cast<std::uint32_t>(dependentsOf[id].size());
    dependents_.insert(dependents_.end(), dependentsOf[id].begin(), dependentsOf[id].end());
  }
  depsOf_.clear();
  depsOf_.shrink_to_fit();
  finalized_ = true;
}

std::uint64_t Schedule::sendCount() const {
  std::uint64_t n = 0;
  for (const Task& t : tasks_) n += t.kind == TaskKind::kSend ? 1 : 0;
  return n;
}

std::uint64_t Schedule::sendBytes() const {
  std::uint64_t n = 0;
  for (const Task& t : tasks_) n += t.kind == TaskKind::kSend ? t.bytes : 0;
  return n;
}

}  // namespace collx::algorithms
