// collx._collx_torch: the torch.distributed backend "collx", one source for torch 1.13 and
// torch 2.x.
//
//   import collx.torch     # registers the backend
//   torch.distributed.init_process_group("collx", init_method="env://")
//
// ProcessGroupCollx runs over one collx::Context, which joins through the c10d::Store torch's
// rendezvous made (C10dStore adapts it to collx's Store), so torch's TCPStore or FileStore
// serves collx too. Every op turns its tensors into a collx::Call and runs it (small ones) or
// starts it on the caller's thread (ranks issue them in the same order, as torch requires),
// and returns a WorkCollx: wait() drives the call on the waiting thread (no hand-off for a
// blocking torch call); getFuture() hands the wait to the group's completion thread, which
// completes the future (DistributedDataParallel's path). Ops whose torch arguments are lists
// of tensors go through one flat buffer and copy in or out around the call. Types and ops map
// onto collx as in the module (shared/mapping.h), and a dropped handle's tensors stay alive as
// there (shared/in_flight.h).
//
// torch 2.x puts a backend behind its ProcessGroup (c10d::Backend, one per device type: this
// one for "cpu"); torch 1.13 has the ProcessGroup itself as the backend. The ops' signatures
// are the same in both; what differs is gathered under "torch versions" below.
//
// This is the only file that includes torch's headers (they cost ~1 minute to compile).
#include <ATen/ATen.h>
#include <pybind11/chrono.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/version.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <numeric>
#include <thread>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "collx/collx.h"
#include "collx/settings.h"
#include "common/in_flight.h"
#include "common/mapping.h"

// ---- torch versions ------------------------------------------------------------------------
#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#define COLLX_TORCH_BACKEND_API 1  // c10d::Backend behind torch's ProcessGroup
#else
#define COLLX_TORCH_BACKEND_API 0  // the ProcessGroup is the backend (torch 1.13)
#endif
// The coalesced all_gather_into_tensor and reduce_scatter_tensor (torch 2.1 on).
#define COLLX_TORCH_COALESCED \
  (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1))

namespace collx::torch_backend {
#if COLLX_TORCH_BACKEND_API
using BackendBase = c10d::Backend;
#else
using BackendBase = c10d::ProcessGroup;
#endif
}  // namespace collx::torch_backend

namespace collx::torch_backend {

namespace py = pybind11;
using rendezvous::Bytes;
using std::chrono::milliseconds;

// ---- the store ---------------------------------------------------------------------------

// collx's Store over a c10d::Store. c10d's errors (c10::Error, std::runtime_error) become
// IoError naming the store; a c10d wait that times out reports the keys still missing, so
// that collx words the timeout as every store does. No reopen(): torch 1.13's stores cannot
// be cloned, so the hang report's watcher shares this one (Store::reopen returns nullptr).
class C10dStore final : public rendezvous::Store {
 public:
  C10dStore(c10::intrusive_ptr<c10d::Store> store, const rendezvous::StoreOptions& options)
      : rendezvous::Store(options), store_(std::move(store)), description_(describe(*store_)) {}

  std::string describe() const override { return description_; }

  // The host of the TCPStore under torch's prefixes, if any: its route picks collx's
  // interface, as MASTER_ADDR does for collx's own store.
  static std::string tcpHost(c10d::Store& store) {
    if (auto* prefix = dynamic_cast<c10d::PrefixStore*>(&store)) {
      return tcpHost(*prefix->getUnderlyingStore());
    }
    if (auto* tcp = dynamic_cast<c10d::TCPStore*>(&store)) return tcp->getHost();
    return "";
  }

 protected:
  void doSet(const std::string& key, const Bytes& value) override {
    guarded("set", [&] { store_->set(key, value); });
  }

  std::vector<std::string> doWait(const std::vector<std::string>& keys,
                                  rendezvous::Clock::time_point deadline) override {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - rendezvous::Clock::now());
    if (left > milliseconds(0) && left < kShortWait) {
      // A short wait (the recovery's agreement waits 1 ms, then twice as long, up to 50 ms,
      // looking around in between) is a few looks: torch 2's TCPStore client logs a warning
      // each time one of its waits times out ("waitForInput: poll for socket ... likely a
      // timeout"), a line per wait on every rank.
      return rendezvous::detail::pollForKeys(
          keys, deadline, [&](const std::string& key) { return doCheck({key}); });
    }
    if (left.count() > 0) {
      try {
        // c10d takes 0 to mean "no timeout": never pass it.
        store_->wait(keys, std::max(left, milliseconds(1)));
        return {};
      } catch (const std::exception& e) {
        std::vector<std::string> missing = missingKeys(keys);
        if (missing.empty()) return {};
        if (rendezvous::Clock::now() + milliseconds(50) < deadline) {
          // Not a timeout: the store failed.
          throw IoError(where("wait"), description_ + ": " + firstLine(e.what()));
        }
        return missing;
      }
    }
    return missingKeys(keys);
  }

  std::vector<std::string> doMultiGet(const std::vector<std::string>& keys,
                                      rendezvous::Clock::time_point deadline,
                                      std::vector<Bytes>& values) override {
    std::vector<std::string> missing = doWait(keys, deadline);
    if (!missing.empty()) return missing;
    values.clear();
    for (const auto& key : keys) values.push_back(guarded("get", [&] { return store_->get(key); }));
    return {};
  }

  std::int64_t doAdd(const std::string& key, std::int64_t delta) override {
    return guarded("add", [&] { return store_->add(key, delta); });
  }

  // c10d's stores answer a compare-and-set on an absent key with a non-empty expected value
  // by returning the expected value; collx's contract returns empty then. And torch 1.13's
  // TCPStore daemon wakes the clients waiting for a key on set() but not on compareSet():
  // a successful swap is set() again (same value) so that waiters see it.
  Bytes doCompareSet(const std::string& key, const Bytes& expected, const Bytes& desired) override {
    Bytes held = guarded("compareSet", [&] { return store_->compareSet(key, expected, desired); });
    if (!expected.empty() && held == expected && expected != desired) return {};
    if (!expected.empty() && held == expected && !doCheck({key})) return {};
    if (held == desired && expected != desired) doSet(key, desired);
    return held;
  }

  bool doCheck(const std::vector<std::string>& keys) override {
    return guarded("check", [&] { return store_->check(keys); });
  }

  bool doErase(const std::string& key) override {
    return guarded("erase", [&] { return store_->deleteKey(key); });
  }

 private:
  static constexpr milliseconds kShortWait{200};

  static std::string firstLine(const std::string& text) { return text.substr(0, text.find('\n')); }

  static std::string describe(c10d::Store& store) {
    if (auto* prefix = dynamic_cast<c10d::PrefixStore*>(&store)) {
      return describe(*prefix->getUnderlyingStore());
    }
    if (auto* tcp = dynamic_cast<c10d::TCPStore*>(&store)) {
      return "torch TCPStore tcp://" + tcp->getHost() + ":" + std::to_string(tcp->getPort());
    }
    if (dynamic_cast<c10d::FileStore*>(&store) != nullptr) return "torch FileStore";
    return "torch c10d store";
  }

  std::vector<std::string> missingKeys(const std::vector<std::string>& keys) {
    std::vector<std::string> missing;
    for (const auto& key : keys) {
      if (!doCheck({key})) missing.push_back(key);
    }
    return missing;
  }

  template <class F>
  auto guarded(const char* op, F&& f) -> decltype(f()) {
    try {
      return f();
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      throw IoError(where(op), description_ + ": " + firstLine(e.what()));
    }
  }

  c10::intrusive_ptr<c10d::Store> store_;
  std::string description_;
};

// ---- the completion thread -------------------------------------------------------------

// Runs tasks in order on one thread: the waits that complete futures (torch needs a thread to
// mark them complete; the tensors of a dropped Work are the group's InFlight's business).
class Completer {
 public:
  Completer() : queue_(std::make_shared<Queue>()) {}
  ~Completer() {
    {
      std::lock_guard<std::mutex> lock(queue_->mutex);
      queue_->stop = true;
    }
    queue_->cv.notify_all();
    if (!thread_.joinable()) return;
    // The last owner may be a Work released by a task on the thread itself.
    if (thread_.get_id() == std::this_thread::get_id()) {
      thread_.detach();
    } else {
      thread_.join();
    }
  }
  Completer(const Completer&) = delete;
  Completer& operator=(const Completer&) = delete;

  void post(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(queue_->mutex);
      queue_->tasks.push_back(std::move(task));
      if (!thread_.joinable()) thread_ = std::thread([queue = queue_] { run(*queue); });
    }
    queue_->cv.notify_one();
  }

 private:
  struct Queue {
    std::mutex mutex;
    std::condition_variable cv;
    std::deque<std::function<void()>> tasks;
    bool stop = false;
  };

  static void run(Queue& q) {
    std::unique_lock<std::mutex> lock(q.mutex);
    for (;;) {
      q.cv.wait(lock, [&] { return q.stop || !q.tasks.empty(); });
      if (q.tasks.empty()) return;  // stopped and drained
      std::function<void()> task = std::move(q.tasks.front());
      q.tasks.pop_front();
      lock.unlock();
      task();
      task = nullptr;  // drops what the task held, outside the lock
      lock.lock();
    }
  }

  std::shared_ptr<Queue> queue_;
  std::thread thread_;
};

// ---- work ----------------------------------------------------------------------------------

// What a call borrows: collx reads and writes these tensors' memory until it ends (after the
// Work was dropped: held by the group's InFlight).
struct Pending {
  Work work;
  std::exception_ptr error;  // of a call that ran on the caller's thread
  std::vector<at::Tensor> keep;
  std::function<void()> finalize;  // copies a flat result out, after success
};

class WorkCollx final : public c10d::Work {
 public:
  WorkCollx(int rank, c10d::OpType type, std::shared_ptr<Pending> pending,
            std::vector<at::Tensor> outputs, std::shared_ptr<Completer> completer,
            std::shared_ptr<bindings::InFlight> inFlight, int source)
      : c10d::Work(rank, type),
        pending_(std::move(pending)),
        outputs_(std::move(outputs)),
        completer_(std::move(completer)),
        inFlight_(std::move(inFlight)),
        source_(source) {}

  ~WorkCollx() override {
    if (ended_.load()) return;
    // torch dropped the handle of a call in flight: its tensors stay until it ends.
    inFlight_->adopt(pending_->work, pending_);
  }

  bool isCompleted() override {
    if (ended_.load()) return true;
    if (!pending_->work.test()) return false;
    end();
    return true;
  }

  bool wait(std::chrono::milliseconds timeout) override {
    if (!ended_.load()) {
      bool done = true;
      try {
        done = pending_->work.wait(timeout == kNoTimeout ? std::nullopt
                                                         : std::optional<milliseconds>(timeout));
      } catch (const Error&) {
        // end() records the call's error and wait rethrows it below.
      }
      if (!done) {
        throw TimeoutError(Where{rank_, c10d::opTypeToString(opType_), -1},
                           "Work.wait timed out after " + std::to_string(timeout.count()) +
                               " ms (the call goes on)");
      }
      end();
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (exception_) std::rethrow_exception(exception_);
    return true;
  }

  std::vector<at::Tensor> result() override { return outputs_; }

  // For a call that already ran on the caller's thread.
  void completeNow() { end(); }
  int sourceRank() const override { return source_; }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    bool post = false;
    c10::intrusive_ptr<c10::ivalue::Future> future;
    {
      std::lock_guard<std::mutex> lock(futureMutex_);
      if (!future_) {
        future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::ofTensors());
        post = !ended_.load();
      }
      future = future_;
    }
    if (post) {
      c10::intrusive_ptr<WorkCollx> self = c10::intrusive_ptr<WorkCollx>::reclaim_copy(this);
      completer_->post([self] {
        try {
          self->pending_->work.wait();
        } catch (const Error&) {
          // recorded by end()
        }
        self->end();
      });
    } else {
      completeFuture();
    }
    return future;
  }

 private:
  // The call ended: copies results out, records its error, completes the future. Once.
  void end() {
    {
      std::lock_guard<std::mutex> lock(endMutex_);
      if (ended_.load()) return;
      std::exception_ptr error = pending_->error ? pending_->error : pending_->work.error();
      if (!error && pending_->finalize) {
        try {
          pending_->finalize();
        } catch (...) {
          error = std::current_exception();
        }
      }
      pending_->finalize = nullptr;
      pending_->keep.clear();
      finish(error);  // c10d::Work's completed_ and exception_, under its mutex
      ended_.store(true);
    }
    completeFuture();
  }

  void completeFuture() {
    c10::intrusive_ptr<c10::ivalue::Future> future;
    {
      std::lock_guard<std::mutex> lock(futureMutex_);
      if (!future_ || futureDone_ || !ended_.load()) return;
      futureDone_ = true;
      future = future_;
    }
    std::exception_ptr error;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      error = exception_;
    }
    if (error) {
      future->setError(error);
    } else {
      future->markCompleted(c10::IValue(outputs_));
    }
  }

  std::shared_ptr<Pending> pending_;
  std::vector<at::Tensor> outputs_;
  std::shared_ptr<Completer> completer_;
  std::shared_ptr<bindings::InFlight> inFlight_;
  int source_;
  std::mutex endMutex_;
  std::atomic<bool> ended_{false};
  std::mutex futureMutex_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  bool futureDone_ = false;
};

// ---- tensors ---------------------------------------------------------------------------

// A contiguous CPU tensor as collx sees it: a type, a count of its elements, and how many of
// those one of the tensor's elements takes (shared/mapping.h: 1; 2 for complex reduced as
// pairs of reals; the item size for types collx has no name for, moved as bytes).
struct Flat {
  void* data = nullptr;
  std::uint64_t count = 0;
  DataType dtype = DataType::kUint8;
  std::uint64_t perElement = 1;
};

// torch's own name for a type ("float32", "bool"; torch.float32 prints as "torch.float32"),
// which is numpy's too: the module finds a tensor's type by that name as well. From c10's
// enumeration, which every torch release keeps, rather than torch's Python helpers, which
// change between releases.
std::string torchName(at::ScalarType type) {
  switch (type) {
    case at::kByte:
      return "uint8";
    case at::kChar:
      return "int8";
    case at::kShort:
      return "int16";
    case at::kInt:
      return "int32";
    case at::kLong:
      return "int64";
    case at::kHalf:
      return "float16";
    case at::kFloat:
      return "float32";
    case at::kDouble:
      return "float64";
    case at::kComplexHalf:
      return "complex32";
    case at::kComplexFloat:
      return "complex64";
    case at::kComplexDouble:
      return "complex128";
    case at::kBool:
      return "bool";
    case at::kBFloat16:
      return "bfloat16";
    case at::kQInt8:
      return "qint8";
    case at::kQUInt8:
      return "quint8";
    case at::kQInt32:
      return "qint32";
    default: {  // torch's name is c10's in lower case ("UInt16": torch.uint16)
      std::string name = c10::toString(type);
      for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      return name;
    }
  }
}

// The element type of a torch type (nullptr: one collx has no name for), looked up by its
// name once per type.
const bindings::ElementType* elementTypeOf(at::ScalarType type) {
  constexpr auto kTypes = static_cast<std::size_t>(at::ScalarType::NumOptions);
  static const std::array<const bindings::ElementType*, kTypes> table = [] {
    std::array<const bindings::ElementType*, kTypes> t{};
    for (std::size_t i = 0; i < kTypes; ++i) {
      try {
        t[i] = bindings::findElementType(torchName(static_cast<at::ScalarType>(i)));
      } catch (const std::exception&) {
        // a type torch has no name for
      }
    }
    return t;
  }();
  const auto i = static_cast<std::size_t>(type);
  return i < kTypes ? table[i] : nullptr;
}

// torch's RedOpType order, which shared/mapping.h's table follows.
static_assert(c10d::ReduceOp::SUM == 0 && c10d::ReduceOp::AVG == 1 &&
                  c10d::ReduceOp::PRODUCT == 2 && c10d::ReduceOp::MIN == 3 &&
                  c10d::ReduceOp::MAX == 4 && c10d::ReduceOp::BAND == 5 &&
                  c10d::ReduceOp::BOR == 6 && c10d::ReduceOp::BXOR == 7 &&
                  c10d::ReduceOp::PREMUL_SUM == bindings::kTorchPremulSum,
              "bindings::kTorchOps lists torch's RedOpType in its order");

void checkTensor(const at::Tensor& t, const char* role, const Where& where) {
  if (!t.defined()) throw InvalidArgument(where, std::string(role) + " is undefined");
  if (!t.device().is_cpu()) {
    throw InvalidArgument(where, std::string(role) + " is on " + t.device().str() +
                                     ": the collx backend moves CPU tensors only");
  }
  if (t.layout() != at::kStrided) {
    throw InvalidArgument(where, std::string(role) + " is not a dense (strided) tensor");
  }
  if (!t.is_contiguous()) {
    throw InvalidArgument(where, std::string(role) + " is not contiguous (sizes " +
                                     c10::str(t.sizes()) + ", strides " + c10::str(t.strides()) +
                                     "): pass t.contiguous()");
  }
}

// `op` set: the tensor is reduced with it.
Flat flatOf(const at::Tensor& t, const char* role, const Where& where,
            std::optional<c10d::ReduceOp::RedOpType> op = std::nullopt) {
  checkTensor(t, role, where);
  const bindings::ElementType* type = elementTypeOf(t.scalar_type());
  std::optional<ReduceOp> reduction;
  if (op) reduction = bindings::torchOp(*op, where);
  // The type's name for unitsOf's refusal (as the module names it), which a type with a collx
  // type never needs.
  const std::string name = type != nullptr && type->dtype ? std::string()
                           : type != nullptr              ? torchName(t.scalar_type())
                                                          : "torch." + torchName(t.scalar_type());
  const bindings::Units units = bindings::unitsOf(
      type, t.element_size(), reduction ? &*reduction : nullptr, name, role, where);
  Flat f;
  f.data = t.data_ptr();
  f.dtype = units.dtype;
  f.count = static_cast<std::uint64_t>(t.nbytes()) / dataTypeSize(units.dtype);
  f.perElement = units.perElement;
  return f;
}

// The collx op of a reduction of `type` (bool's sum and prod as or and and).
ReduceOp reduceOpOf(const c10d::ReduceOp& op, at::ScalarType type, const Where& where) {
  return bindings::opFor(bindings::torchOp(op.op_, where), elementTypeOf(type), where);
}

// The tensors of a list as one contiguous run of memory, if they already are one (e.g.
// torch.empty(P, n).unbind(0)): then the call needs no copy.
bool adjacent(const std::vector<at::Tensor>& list) {
  if (list.empty()) return false;
  auto* next = static_cast<std::uint8_t*>(list[0].data_ptr());
  for (const auto& t : list) {
    if (!t.is_contiguous() || t.scalar_type() != list[0].scalar_type() ||
        static_cast<std::uint8_t*>(t.data_ptr()) != next) {
      return false;
    }
    next += t.nbytes();
  }
  return true;
}

// One flat tensor over the elements of `list` (a copy unless they are adjacent).
at::Tensor packed(const std::vector<at::Tensor>& list) {
  if (adjacent(list)) {
    std::int64_t total = 0;
    for (const auto& t : list) total += t.numel();
    return at::from_blob(list[0].data_ptr(), {total}, list[0].options());
  }
  std::vector<at::Tensor> flat;
  flat.reserve(list.size());
  for (const auto& t : list) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

// Copies a flat result into the tensors of `list` (nothing when they are its memory).
void unpack(const at::Tensor& flat, std::vector<at::Tensor>& list) {
  if (!list.empty() && flat.data_ptr() == list[0].data_ptr()) return;
  std::int64_t at = 0;
  for (auto& t : list) {
    t.copy_(flat.narrow(0, at, t.numel()).view(t.sizes()));
    at += t.numel();
  }
}

// A flat tensor that receives `list`'s elements: the list's own memory when adjacent.
at::Tensor receiver(const std::vector<at::Tensor>& list) {
  if (adjacent(list)) return packed(list);
  std::int64_t total = 0;
  for (const auto& t : list) total += t.numel();
  return at::empty({total}, list[0].options());
}

// ---- the process group -----------------------------------------------------------------

// COLLX_JOIN=1 (a replacement that collx-run started): whether this, the process's first
// group made through a store, joins the running job rather than forming it. Once.
bool joinsOnce() {
  static std::atomic<bool> asked{kJoin.get(Config::process())};
  return asked.exchange(false);
}

class ProcessGroupCollx final : public BackendBase {
 public:
  ProcessGroupCollx(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                    milliseconds timeout)
      : BackendBase(rank, size), completer_(std::make_shared<Completer>()) {
    rendezvous::StoreOptions storeOptions;
    storeOptions.timeout = timeout;
    storeOptions.rank = rank;
    auto adapter = std::make_shared<C10dStore>(store, storeOptions);
    ContextOptions options;
    options.jobId = "torch";
    options.timeout = timeout;
    options.routeHost = C10dStore::tcpHost(*store);
    options.secret = jobSecretOf(Config::process());  // collx-run's, if it launched the job
    options.tls = tlsOf(Config::process());
    options.eraseKeys = false;  // torch's store lives and dies with torch's job
    if (joinsOnce()) {
      // A replacement (collx-run --on-failure replace): its first group takes the dead
      // rank's place in the running job, whose ranks re-form (ProcessGroupCollx.reform).
      BootstrapOptions join;
      join.storeObject = adapter;
      join.jobId = options.jobId;
      join.timeout = timeout;
      context_ = collx::join(join);
      joined_ = true;
      if (context_->rank() != rank || context_->size() != size) {
        throw InvalidArgument(Where{rank, "ProcessGroupCollx", -1},
                              "this newcomer was taken in as rank " +
                                  std::to_string(context_->rank()) + " of " +
                                  std::to_string(context_->size()) + ", but torch made it rank " +
                                  std::to_string(rank) + " of " + std::to_string(size));
      }
    } else {
      context_ = Context::create(std::move(adapter), rank, size, options);
    }
    eagerBytes_ = kTorchEagerBytes.get(Config::process());
    init();
  }

  // A sub-group over `context`, another group's split (Context::split): no rendezvous and
  // no connections of its own.
  explicit ProcessGroupCollx(std::shared_ptr<Context> context)
      : BackendBase(context->rank(), context->size()),
        context_(std::move(context)),
        completer_(std::make_shared<Completer>()) {
    eagerBytes_ = kTorchEagerBytes.get(Config::process());
    init();
  }

  // A group of `ranks` (this group's) over this group's connections; see Context::split.
  c10::intrusive_ptr<ProcessGroupCollx> split(const std::vector<int>& ranks,
                                              const std::string& name, milliseconds timeout) {
    auto child = c10::make_intrusive<ProcessGroupCollx>(context_->split(ranks, name, timeout));
    std::lock_guard<std::mutex> lock(splitsMutex_);
    forgetEndedSplits();
    splits_.push_back(Split{
        c10::weak_intrusive_ptr<BackendBase>(c10::intrusive_ptr<BackendBase>(child)), ranks, name});
    return child;
  }

  ~ProcessGroupCollx() override {
    // Waiting for the dropped calls and finishing the pending waits (each bounded by its
    // call's deadline) may run futures' callbacks written in Python: never hold the GIL while
    // joining their thread.
    if (Py_IsInitialized() && PyGILState_Check()) {
      py::gil_scoped_release release;
      inFlight_->drain();
      completer_.reset();
      context_.reset();
    } else {
      inFlight_->drain();
      completer_.reset();
      context_.reset();
    }
  }

  const std::string getBackendName() const override { return "collx"; }
  Context& context() { return *context_; }
  bool joined() const noexcept { return joined_; }

  // After a failure, on every live rank: the group's context re-forms (Context::reform) with
  // newcomers in the failed ranks' places, and the group goes on in place over it, with the
  // same ranks and size (torch's are fixed). Returns (failed, joined). Where some failed rank
  // found no newcomer, the ranks changed: InvalidArgument, and the group stays failed.
  std::pair<std::vector<int>, std::vector<int>> reform(milliseconds timeout,
                                                       milliseconds replacementWait) {
    inFlight_->drain();
    Reformed r = context_->reform(timeout, replacementWait);
    if (r.context->rank() != rank_ || r.context->size() != size_) {
      throw InvalidArgument(Where{rank_, "ProcessGroupCollx.reform", -1},
                            "the group re-formed with " + std::to_string(r.context->size()) +
                                " ranks (failed ranks without a newcomer were left out), but a "
                                "torch group keeps its " +
                                std::to_string(size_) +
                                ": make a new process group of the survivors");
    }
    context_ = std::move(r.context);
    // This group's live splits (torch's sub-groups) go on in place too, each over a split of
    // the re-formed context with the same ranks and name, in the order they were made: a
    // newcomer's new_group calls, which its script makes in that order, make the same.
    std::vector<Split> splits;
    {
      std::lock_guard<std::mutex> lock(splitsMutex_);
      forgetEndedSplits();
      splits = splits_;
    }
    for (const Split& s : splits) {
      if (auto held = s.group.lock()) {
        auto* child = static_cast<ProcessGroupCollx*>(held.get());
        child->inFlight_->drain();
        child->context_ = context_->split(s.ranks, s.name, timeout);
      }
    }
    return {r.failed, r.joined};
  }

  // The small-call path (collx.torch.all_reduce): an all_reduce in place, run to completion
  // here, with no torch dispatch, Work or future around it.
  void allReduceNow(const at::Tensor& t, c10d::ReduceOp::RedOpType op) {
    const Call c = allreduceOf(t, op, c10d::kUnsetTimeout, here("all_reduce"));
    inFlight_->sweep();
    collx::execute(*context_, c);
  }

  // collx's own blocking allreduce of `t`, `iterations` times in a row on this group's
  // context (no Python, no torch): the floor the torch paths are measured against
  // (benchmarks/compare/torch_backends.py). Returns the seconds of each call.
  std::vector<double> timeOwnAllReduce(const at::Tensor& t, int iterations) {
    Where where = here("all_reduce");
    Flat f = flatOf(t, "the tensor", where, c10d::ReduceOp::SUM);
    std::vector<double> seconds;
    seconds.reserve(static_cast<std::size_t>(std::max(iterations, 0)));
    for (int i = 0; i < iterations; ++i) {
      const auto start = std::chrono::steady_clock::now();
      collx::allreduce(*context_, f.data, f.data, f.count, f.dtype);
      seconds.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    return seconds;
  }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    Where where = here("broadcast");
    const at::Tensor& t = single(tensors, where);
    if (opts.rootTensor != 0) throw InvalidArgument(where, "rootTensor must be 0");
    Flat f = flatOf(t, "the tensor", where);
    Call c = describe(CallKind::kBroadcast, opts.timeout, f);
    c.recvbuf = f.data;
    c.root = static_cast<int>(opts.rootRank);
    return launch(c10d::OpType::BROADCAST, tensors, {t}, c);
  }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    Where where = here("allreduce");
    const at::Tensor& t = single(tensors, where);
    return launch(c10d::OpType::ALLREDUCE, tensors, {t},
                  allreduceOf(t, opts.reduceOp.op_, opts.timeout, where));
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override {
    Where where = here("allreduce_coalesced");
    if (tensors.empty()) throw InvalidArgument(where, "no tensors");
    for (const auto& t : tensors) {
      checkTensor(t, "a tensor", where);
      if (t.scalar_type() != tensors[0].scalar_type()) {
        throw InvalidArgument(where, "the tensors have different types");
      }
    }
    at::Tensor flat = packed(tensors);
    Flat f = flatOf(flat, "the tensors", where, opts.reduceOp.op_);
    Call c = describe(CallKind::kAllreduce, opts.timeout, f);
    c.sendbuf = c.recvbuf = f.data;
    c.op = reduceOpOf(opts.reduceOp, flat.scalar_type(), where);
    std::vector<at::Tensor> outputs = tensors;
    return launch(c10d::OpType::ALLREDUCE_COALESCED, tensors, {flat}, c,
                  [flat, outputs]() mutable { unpack(flat, outputs); });
  }

  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override {
    Where where = here("reduce");
    const at::Tensor& t = single(tensors, where);
    if (opts.rootTensor != 0) throw InvalidArgument(where, "rootTensor must be 0");
    Flat f = flatOf(t, "the tensor", where, opts.reduceOp.op_);
    Call c = describe(CallKind::kReduce, opts.timeout, f);
    c.sendbuf = c.recvbuf = f.data;
    c.op = reduceOpOf(opts.reduceOp, t.scalar_type(), where);
    c.root = static_cast<int>(opts.rootRank);
    return launch(c10d::OpType::REDUCE, tensors, {t}, c);
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override {
    Where where = here("allgather");
    const at::Tensor& in = single(inputs, where);
    if (outputs.size() != 1) throw InvalidArgument(where, "expected one list of output tensors");
    std::vector<at::Tensor> list = outputs[0];
    checkList(list, size_, in, "output", where);
    Flat fin = flatOf(in, "the input", where);
    at::Tensor flat = receiver(list);
    Flat fout = flatOf(flat, "the output", where);
    auto [counts, equal] = countsOf(list, fin);
    if (counts[rank_] != fin.count) {
      throw InvalidArgument(where, "output " + std::to_string(rank_) + " holds " +
                                       std::to_string(list[rank_].numel()) +
                                       " elements, the input " + std::to_string(in.numel()));
    }
    Call c = describe(equal ? CallKind::kAllgather : CallKind::kAllgatherv, opts.timeout, fin);
    c.sendbuf = fin.data;
    c.recvbuf = fout.data;
    c.counts = &counts;  // (allgatherv's blocks packed in rank order: no displacements)
    return launch(c10d::OpType::ALLGATHER, list, {in, flat}, c,
                  [flat, list]() mutable { unpack(flat, list); });
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override {
    Where where = here("all_gather_into_tensor");
    Flat fin = flatOf(input, "the input", where);
    Flat fout = flatOf(output, "the output", where);
    checkSameType(input, output, where);
    if (fout.count != fin.count * static_cast<std::uint64_t>(size_)) {
      throw InvalidArgument(where, "the output holds " + std::to_string(output.numel()) +
                                       " elements, not " + std::to_string(size_) + " x the " +
                                       std::to_string(input.numel()) + " of the input");
    }
    Call c = describe(CallKind::kAllgather, opts.timeout, fin);
    c.sendbuf = fin.data;
    c.recvbuf = fout.data;
    return launch(c10d::OpType::_ALLGATHER_BASE, {output}, {input, output}, c);
  }

  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override {
    Where where = here("gather");
    const at::Tensor& in = single(inputs, where);
    const int root = static_cast<int>(opts.rootRank);
    checkRoot(root, where);
    Flat fin = flatOf(in, "the input", where);
    Call c = describe(CallKind::kGather, opts.timeout, fin);
    c.sendbuf = fin.data;
    c.root = root;
    if (rank_ != root) {
      if (!outputs.empty() && !outputs[0].empty()) {
        throw InvalidArgument(
            where, "only the root (rank " + std::to_string(root) + ") takes output tensors");
      }
      return launch(c10d::OpType::GATHER, {}, {in}, c);
    }
    if (outputs.size() != 1) throw InvalidArgument(where, "expected one list of output tensors");
    std::vector<at::Tensor> list = outputs[0];
    checkList(list, size_, in, "output", where);
    for (const auto& t : list) {
      if (t.numel() != in.numel()) {
        throw InvalidArgument(where, "every output tensor must have the input's " +
                                         std::to_string(in.numel()) + " elements");
      }
    }
    at::Tensor flat = receiver(list);
    c.recvbuf = flatOf(flat, "the output", where).data;
    return launch(c10d::OpType::GATHER, list, {in, flat}, c,
                  [flat, list]() mutable { unpack(flat, list); });
  }

  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override {
    Where where = here("scatter");
    const at::Tensor& out = single(outputs, where);
    const int root = static_cast<int>(opts.rootRank);
    checkRoot(root, where);
    Flat fout = flatOf(out, "the output", where);
    Call c = describe(CallKind::kScatter, opts.timeout, fout);
    c.recvbuf = fout.data;
    c.root = root;
    if (rank_ != root) {
      if (!inputs.empty() && !inputs[0].empty()) {
        throw InvalidArgument(
            where, "only the root (rank " + std::to_string(root) + ") takes input tensors");
      }
      return launch(c10d::OpType::SCATTER, {out}, {out}, c);
    }
    if (inputs.size() != 1) throw InvalidArgument(where, "expected one list of input tensors");
    std::vector<at::Tensor> list = inputs[0];
    checkList(list, size_, out, "input", where);
    for (const auto& t : list) {
      if (t.numel() != out.numel()) {
        throw InvalidArgument(where, "every input tensor must have the output's " +
                                         std::to_string(out.numel()) + " elements");
      }
    }
    at::Tensor flat = packed(list);
    c.sendbuf = flatOf(flat, "the input", where).data;
    return launch(c10d::OpType::SCATTER, {out}, {out, flat}, c);
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override {
    Where where = here("reduce_scatter");
    const at::Tensor& out = single(outputs, where);
    if (inputs.size() != 1) throw InvalidArgument(where, "expected one list of input tensors");
    std::vector<at::Tensor> list = inputs[0];
    checkList(list, size_, out, "input", where);
    at::Tensor flat = packed(list);
    Flat fin = flatOf(flat, "the input", where, opts.reduceOp.op_);
    Flat fout = flatOf(out, "the output", where, opts.reduceOp.op_);
    auto [counts, equal] = countsOf(list, fin);
    if (counts[rank_] != fout.count) {
      throw InvalidArgument(where, "input " + std::to_string(rank_) + " holds " +
                                       std::to_string(list[rank_].numel()) +
                                       " elements, the output " + std::to_string(out.numel()));
    }
    Call c =
        describe(equal ? CallKind::kReduceScatter : CallKind::kReduceScatterv, opts.timeout, fout);
    c.sendbuf = fin.data;
    c.recvbuf = fout.data;
    c.counts = &counts;
    c.op = reduceOpOf(opts.reduceOp, out.scalar_type(), where);
    return launch(c10d::OpType::REDUCE_SCATTER, {out}, {out, flat}, c);
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override {
    Where where = here("reduce_scatter_tensor");
    Flat fin = flatOf(input, "the input", where, opts.reduceOp.op_);
    Flat fout = flatOf(output, "the output", where, opts.reduceOp.op_);
    checkSameType(input, output, where);
    if (fin.count != fout.count * static_cast<std::uint64_t>(size_)) {
      throw InvalidArgument(where, "the input holds " + std::to_string(input.numel()) +
                                       " elements, not " + std::to_string(size_) + " x the " +
                                       std::to_string(output.numel()) + " of the output");
    }
    Call c = describe(CallKind::kReduceScatter, opts.timeout, fout);
    c.sendbuf = fin.data;
    c.recvbuf = fout.data;
    c.op = reduceOpOf(opts.reduceOp, output.scalar_type(), where);
    return launch(c10d::OpType::_REDUCE_SCATTER_BASE, {output}, {input, output}, c);
  }

  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& outputSplits,
                                               std::vector<int64_t>& inputSplits,
                                               const c10d::AllToAllOptions& opts) override {
    Where where = here("all_to_all_single");
    Flat fin = flatOf(input, "the input", where);
    Flat fout = flatOf(output, "the output", where);
    checkSameType(input, output, where);
    const auto P = static_cast<std::uint64_t>(size_);
    if (outputSplits.empty() && inputSplits.empty()) {
      if (fin.count % P != 0 || fout.count != fin.count) {
        throw InvalidArgument(where, "without split sizes, input (" +
                                         std::to_string(input.numel()) + ") and output (" +
                                         std::to_string(output.numel()) +
                                         ") must hold equal numbers of elements, divisible by " +
                                         std::to_string(size_));
      }
      Call c = describe(CallKind::kAlltoall, opts.timeout, fin);
      c.sendbuf = fin.data;
      c.recvbuf = fout.data;
      c.count = fin.count / P;
      return launch(c10d::OpType::ALLTOALL_BASE, {output}, {input, output}, c);
    }
    const Counts sendCounts = splitCounts(input, fin, inputSplits, "input", where);
    const Counts recvCounts = splitCounts(output, fout, outputSplits, "output", where);
    Call c = describe(CallKind::kAlltoallv, opts.timeout, fin);
    c.sendbuf = fin.data;
    c.recvbuf = fout.data;
    c.counts = &sendCounts;  // (the blocks packed in rank order: no displacements)
    c.recvCounts = &recvCounts;
    return launch(c10d::OpType::ALLTOALL_BASE, {output}, {input, output}, c);
  }

  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override {
    Where where = here("all_to_all");
    if (inputs.empty()) throw InvalidArgument(where, "no input tensors");
    checkList(inputs, size_, inputs[0], "input", where);
    checkList(outputs, size_, inputs[0], "output", where);
    at::Tensor in = packed(inputs);
    at::Tensor flat = receiver(outputs);
    Flat fin = flatOf(in, "the input", where);
    Flat fout = flatOf(flat, "the output", where);
    const Counts sendCounts = countsOf(inputs, fin).first;
    const Counts recvCounts = countsOf(outputs, fin).first;
    Call c = describe(CallKind::kAlltoallv, opts.timeout, fin);
    c.sendbuf = fin.data;
    c.recvbuf = fout.data;
    c.counts = &sendCounts;  // (the blocks packed in rank order: no displacements)
    c.recvCounts = &recvCounts;
    std::vector<at::Tensor> list = outputs;
    return launch(c10d::OpType::ALLTOALL, list, {in, flat}, c,
                  [flat, list]() mutable { unpack(flat, list); });
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override {
    return launch(c10d::OpType::BARRIER, {}, {}, describe(CallKind::kBarrier, opts.timeout, {}));
  }

  // dist.monitored_barrier: a barrier bounded by its timeout, which every waiting rank leaves
  // with a TimeoutError naming the rank it waited for (and, once the hang report has run,
  // the job's diagnosis), rather than hanging. Unlike gloo's, rank 0's need not name every
  // rank that did not come (waitAllRanks changes nothing).
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) override {
    barrier(opts)->wait();
  }

#if COLLX_TORCH_COALESCED
  // dist._coalescing_manager's all_gather_into_tensor calls (FSDP's): one allgather of the
  // inputs side by side. Rank r's block of the result holds rank r's inputs in turn; each
  // output gets its column of blocks.
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override {
    Where where = here("all_gather_into_tensor_coalesced");
    const std::vector<std::int64_t> sizes = coalescedSizes(inputs, outputs, where);
    const std::int64_t total = std::accumulate(sizes.begin(), sizes.end(), std::int64_t{0});
    at::Tensor in = packed(inputs);
    at::Tensor flat = at::empty({size_ * total}, in.options());
    Flat fin = flatOf(in, "the inputs", where);
    Flat fout = flatOf(flat, "the outputs", where);
    Call c = describe(CallKind::kAllgather, opts.timeout, fin);
    c.sendbuf = fin.data;
    c.recvbuf = fout.data;
    std::vector<at::Tensor> list = outputs;
    const std::int64_t P = size_;
    // The inputs too: `in` is a view of them where they lie side by side (FSDP's shards).
    std::vector<at::Tensor> keep = inputs;
    keep.push_back(in);
    keep.push_back(flat);
    return launch(c10d::OpType::COALESCED, list, std::move(keep), c,
                  [flat, list, sizes, total, P]() mutable {
                    at::Tensor rows = flat.view({P, total});
                    std::int64_t at = 0;
                    for (std::size_t i = 0; i < list.size(); ++i) {
                      list[i].view({P, sizes[i]}).copy_(rows.narrow(1, at, sizes[i]));
                      at += sizes[i];
                    }
                  });
  }

  // dist._coalescing_manager's reduce_scatter_tensor calls: one reduce_scatter over the
  // inputs side by side (the block for rank r holds every input's block r in turn).
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override {
    Where where = here("reduce_scatter_tensor_coalesced");
    const std::vector<std::int64_t> sizes = coalescedSizes(outputs, inputs, where);
    const std::int64_t total = std::accumulate(sizes.begin(), sizes.end(), std::int64_t{0});
    const std::int64_t P = size_;
    at::Tensor flat = at::empty({P, total}, inputs[0].options());
    std::int64_t at = 0;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      flat.narrow(1, at, sizes[i]).copy_(inputs[i].view({P, sizes[i]}));
      at += sizes[i];
    }
    at::Tensor out = at::empty({total}, inputs[0].options());
    Flat fin = flatOf(flat, "the inputs", where, opts.reduceOp.op_);
    Flat fout = flatOf(out, "the outputs", where, opts.reduceOp.op_);
    Call c = describe(CallKind::kReduceScatter, opts.timeout, fout);
    c.sendbuf = fin.data;
    c.recvbuf = fout.data;
    c.op = reduceOpOf(opts.reduceOp, out.scalar_type(), where);
    std::vector<at::Tensor> list = outputs;
    return launch(c10d::OpType::COALESCED, list, {flat, out}, c, [out, list, sizes]() mutable {
      std::int64_t at = 0;
      for (std::size_t i = 0; i < list.size(); ++i) {
        list[i].view({-1}).copy_(out.narrow(0, at, sizes[i]));
        at += sizes[i];
      }
    });
  }
#endif

  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override {
    Where where = here("send");
    const at::Tensor& t = single(tensors, where);
    Flat f = flatOf(t, "the tensor", where);
    Call c = describe(CallKind::kSend, c10d::kUnsetTimeout, f);
    c.sendbuf = f.data;
    c.peer = dst;
    c.tag = tagOf(tag, where);
    return launch(c10d::OpType::SEND, tensors, {t}, c);
  }

  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override {
    Where where = here("recv");
    const at::Tensor& t = single(tensors, where);
    Flat f = flatOf(t, "the tensor", where);
    Call c = describe(CallKind::kRecv, c10d::kUnsetTimeout, f);
    c.recvbuf = f.data;
    c.peer = src;
    c.tag = tagOf(tag, where);
    return launch(c10d::OpType::RECV, tensors, {t}, c, {}, src);
  }

  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override {
    throw Unsupported(here("recv"),
                      "receiving from any source is not supported by the collx backend: name "
                      "the source rank");
  }

 private:
  Where here(const char* what) const { return Where{rank_, what, -1}; }

  // A call of `kind` over elements `f` (its count and type), with the op's timeout (torch's
  // kUnsetTimeout, -1: the group's).
  static Call describe(CallKind kind, milliseconds timeout, const Flat& f) {
    Call c;
    c.kind = kind;
    c.count = f.count;
    c.dtype = f.dtype;
    if (timeout.count() > 0) c.options.timeout = timeout;
    return c;
  }

  // An allreduce of `t` in place.
  static Call allreduceOf(const at::Tensor& t, c10d::ReduceOp::RedOpType op, milliseconds timeout,
                          const Where& where) {
    Flat f = flatOf(t, "the tensor", where, op);
    Call c = describe(CallKind::kAllreduce, timeout, f);
    c.sendbuf = c.recvbuf = f.data;
    c.op = reduceOpOf(c10d::ReduceOp(op), t.scalar_type(), where);
    return c;
  }

  static std::uint64_t tagOf(int tag, const Where& where) {
    if (tag < 0) throw InvalidArgument(where, "tag " + std::to_string(tag) + " is negative");
    return static_cast<std::uint64_t>(tag);
  }

  static const at::Tensor& single(const std::vector<at::Tensor>& tensors, const Where& where) {
    if (tensors.size() != 1) {
      throw InvalidArgument(where, "the collx backend takes one tensor per rank, got " +
                                       std::to_string(tensors.size()));
    }
    return tensors[0];
  }

  // The element counts of `small` (an input of an allgather, an output of a reduce-scatter)
  // of coalesced pairs whose `large` tensor holds P times as many; all of one type.
  std::vector<std::int64_t> coalescedSizes(const std::vector<at::Tensor>& small,
                                           const std::vector<at::Tensor>& large,
                                           const Where& where) const {
    if (small.empty() || small.size() != large.size()) {
      throw InvalidArgument(where, "expected as many inputs as outputs (at least one), got " +
                                       std::to_string(small.size()) + " and " +
                                       std::to_string(large.size()));
    }
    std::vector<std::int64_t> sizes;
    for (std::size_t i = 0; i < small.size(); ++i) {
      checkTensor(small[i], "a tensor", where);
      checkTensor(large[i], "a tensor", where);
      const at::ScalarType type = small[0].scalar_type();
      const at::ScalarType other =
          small[i].scalar_type() != type ? small[i].scalar_type() : large[i].scalar_type();
      if (other != type) {
        throw InvalidArgument(where, "the tensors have different types (" +
                                         std::string(c10::toString(type)) + " and " +
                                         std::string(c10::toString(other)) +
                                         "): coalesce calls of one type");
      }
      if (large[i].numel() != small[i].numel() * size_) {
        throw InvalidArgument(where, "pair " + std::to_string(i) + ": " +
                                         std::to_string(large[i].numel()) + " elements are not " +
                                         std::to_string(size_) + " x " +
                                         std::to_string(small[i].numel()));
      }
      sizes.push_back(small[i].numel());
    }
    return sizes;
  }

  void checkRoot(int root, const Where& where) const {
    if (root < 0 || root >= size_) {
      throw InvalidArgument(
          where, "root " + std::to_string(root) + " is outside [0, " + std::to_string(size_) + ")");
    }
  }

  static void checkSameType(const at::Tensor& a, const at::Tensor& b, const Where& where) {
    if (a.scalar_type() != b.scalar_type()) {
      throw InvalidArgument(where, "the input is " + std::string(c10::toString(a.scalar_type())) +
                                       " but the output is " +
                                       std::string(c10::toString(b.scalar_type())));
    }
  }

  // A list of `size` CPU tensors of `like`'s type (list entries may be non-contiguous: the
  // copy in or out handles them).
  static void checkList(const std::vector<at::Tensor>& list, int size, const at::Tensor& like,
                        const char* role, const Where& where) {
    if (static_cast<int>(list.size()) != size) {
      throw InvalidArgument(where, "expected " + std::to_string(size) + " " + role +
                                       " tensors (one per rank), got " +
                                       std::to_string(list.size()));
    }
    for (const auto& t : list) {
      if (!t.defined() || !t.device().is_cpu() || t.layout() != at::kStrided) {
        throw InvalidArgument(where,
                              std::string("every ") + role + " tensor must be a dense CPU tensor");
      }
      if (t.scalar_type() != like.scalar_type()) {
        throw InvalidArgument(where, std::string("every ") + role + " tensor must be " +
                                         std::string(c10::toString(like.scalar_type())) + ", got " +
                                         std::string(c10::toString(t.scalar_type())));
      }
    }
  }

  // Per-rank element counts of a list in the units `flat` moves (`flat` is a tensor of the
  // list's type seen by flatOf: elements, pairs of reals, or bytes), and whether they are
  // all equal.
  static std::pair<Counts, bool> countsOf(const std::vector<at::Tensor>& list, const Flat& flat) {
    Counts counts;
    bool equal = true;
    for (const auto& t : list) {
      counts.push_back(unitsOf(t, flat));
      equal = equal && counts.back() == counts.front();
    }
    return {counts, equal};
  }

  static std::uint64_t unitsOf(const at::Tensor& t, const Flat& flat) {
    return static_cast<std::uint64_t>(t.numel()) * flat.perElement;
  }

  // all_to_all_single's split sizes (rows of dim 0) as element counts; empty: equal rows.
  Counts splitCounts(const at::Tensor& t, const Flat& f, const std::vector<int64_t>& splits,
                     const char* role, const Where& where) const {
    const std::int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    const std::uint64_t perRow = rows > 0 ? f.count / static_cast<std::uint64_t>(rows) : 0;
    Counts counts;
    if (splits.empty()) {
      if (rows % size_ != 0) {
        throw InvalidArgument(where, std::string("the ") + role + "'s " + std::to_string(rows) +
                                         " rows do not split evenly over " + std::to_string(size_) +
                                         " ranks");
      }
      counts.assign(size_, static_cast<std::uint64_t>(rows / size_) * perRow);
      return counts;
    }
    if (static_cast<int>(splits.size()) != size_) {
      throw InvalidArgument(where, std::string("the ") + role + " split sizes have " +
                                       std::to_string(splits.size()) + " entries for " +
                                       std::to_string(size_) + " ranks");
    }
    std::int64_t total = 0;
    for (auto s : splits) {
      if (s < 0) throw InvalidArgument(where, "a negative split size");
      total += s;
      counts.push_back(static_cast<std::uint64_t>(s) * perRow);
    }
    if (total != rows) {
      throw InvalidArgument(where, std::string("the ") + role + " split sizes add up to " +
                                       std::to_string(total) + ", the tensor has " +
                                       std::to_string(rows) + " rows");
    }
    return counts;
  }

  // Runs or starts a call and wraps it. `keep` stays alive until the call ends; `outputs`
  // are the Work's result(); `finalize` runs after success (copies a flat result out).
  //
  // A collective whose buffers hold at most COLLX_TORCH_EAGER_BYTES runs to completion here,
  // on the caller's thread: torch makes every blocking call as a nonblocking one and waits
  // at once, and handing a small call to another thread and back costs more than the call
  // (three context switches per call where ranks outnumber cores). Its Work is complete
  // when returned (its error, if any, is raised by wait()). Larger calls and point to point
  // (whose peer may need this rank's next op first) run in the background.
  c10::intrusive_ptr<c10d::Work> launch(c10d::OpType type, std::vector<at::Tensor> outputs,
                                        std::vector<at::Tensor> keep, const Call& call,
                                        std::function<void()> finalize = {}, int source = -1) {
    inFlight_->sweep();  // releases the tensors of dropped calls that have ended
    std::uint64_t bytes = 0;
    for (const auto& t : keep) bytes = std::max<std::uint64_t>(bytes, t.nbytes());
    const bool pointToPoint = type == c10d::OpType::SEND || type == c10d::OpType::RECV;
    const bool eager = !pointToPoint && bytes <= eagerBytes_;
    auto pending = std::make_shared<Pending>();
    pending->keep = std::move(keep);
    pending->finalize = std::move(finalize);
    try {
      if (!eager) {
        pending->work = collx::start(*context_, call);
        return c10::make_intrusive<WorkCollx>(rank_, type, std::move(pending), std::move(outputs),
                                              completer_, inFlight_, source);
      }
      collx::execute(*context_, call);
    } catch (const Error&) {
      // Raised by wait(), whichever way the call went (torch waits at once when blocking).
      pending->error = std::current_exception();
    }
    auto work = c10::make_intrusive<WorkCollx>(rank_, type, std::move(pending), std::move(outputs),
                                               completer_, inFlight_, source);
    work->completeNow();
    return work;
  }

  std::uint64_t eagerBytes_ = 0;
  std::shared_ptr<Context> context_;
  bool joined_ = false;  // a newcomer's group: it joined a running job
  // The groups split from this one (split()), which reform() splits again.
  // (Held as the base: this class is incomplete here.)
  struct Split {
    c10::weak_intrusive_ptr<BackendBase> group;
    std::vector<int> ranks;
    std::string name;
  };
  void forgetEndedSplits() {
    splits_.erase(std::remove_if(splits_.begin(), splits_.end(),
                                 [](const Split& s) { return s.group.expired(); }),
                  splits_.end());
  }
  std::mutex splitsMutex_;
  std::vector<Split> splits_;
  std::shared_ptr<Completer> completer_;
  std::shared_ptr<bindings::InFlight> inFlight_ = std::make_shared<bindings::InFlight>();
};

// ---- the small-call path's entry ----------------------------------------------------------

// collx.torch.all_reduce(tensor, op="sum", group=None) is this C function (allReduceEntry):
// the Python wrapper it replaced cost ~280 ns per call at P=1, and more where ranks outnumber
// cores, on a path whose budget is 2 us above collx's own call. Each call here: the op (a
// name, compared by identity with the interned names first; or a dist.ReduceOp, by identity
// with the ones seen before), the default group read where torch keeps it, the group's
// backend by identity from a small cache, torch.compiler.is_compiling() where it exists,
// then the call with the GIL released. What is rare goes back to collx.torch's Python
// helpers, which _fast_setup() hands over at import: an op never seen (_op_value), a group
// not in the cache (_fast_backend: backend_of), a call being compiled or exported (the
// custom op torch.ops.collx.all_reduce_), and an error (_raise_last: pybind11's translation
// into collx's exception classes). Everything runs under the GIL but the call itself.
thread_local std::exception_ptr lastError;

// The small-call path's all_reduce without the GIL: true when done; else false, its error
// kept in lastError.
bool allReduceReleased(ProcessGroupCollx* pg, const at::Tensor& t, long op) {
  std::exception_ptr error;
  PyThreadState* saved = PyEval_SaveThread();
  try {
    pg->allReduceNow(t, static_cast<c10d::ReduceOp::RedOpType>(op));
  } catch (...) {
    error = std::current_exception();
  }
  PyEval_RestoreThread(saved);
  if (!error) return true;
  lastError = std::move(error);
  return false;
}

namespace fast {

constexpr std::array<const char*, 8> kOpNames = {"sum", "avg",  "product", "min",
                                                 "max", "band", "bor",     "bxor"};
constexpr const char* kOpList = "['avg', 'band', 'bor', 'bxor', 'max', 'min', 'product', 'sum']";

// A group whose backend is known. `group` is borrowed: `ref` (a weak reference with the
// callback forget()) clears the entry before the group's memory can be reused, so that an
// identity comparison stays sound, and lets the backend go with the group
// (destroy_process_group frees it). `backend` is held unless it is the group itself (torch
// 1.13), which holding would keep alive.
struct GroupEntry {
  PyObject* group = nullptr;
  PyObject* ref = nullptr;
  PyObject* backend = nullptr;
  ProcessGroupCollx* pg = nullptr;
};

// A dist.ReduceOp seen before (held: its identity stays its own) and torch's value for it.
struct OpEntry {
  PyObject* op = nullptr;
  long value = 0;
};

struct State {
  std::array<PyObject*, kOpNames.size()> names{};  // interned
  std::array<PyObject*, 3> keywords{};             // "tensor", "op", "group", interned
  std::array<OpEntry, 8> ops{};
  std::size_t nextOp = 0;
  std::array<GroupEntry, 4> groups{};
  std::size_t nextGroup = 0;
  // From collx.torch (_fast_setup): the helpers, where torch keeps the default group (an
  // object and the name of its attribute), and torch.compiler.is_compiling (or None, or
  // where its flag is: (object, name of the attribute)).
  PyObject* opValue = nullptr;
  PyObject* backendOf = nullptr;
  PyObject* compiling = nullptr;
  PyObject* isCompiling = nullptr;
  PyObject* defaultOwner = nullptr;
  PyObject* defaultName = nullptr;
  PyObject* raiseLast = nullptr;
  PyObject* forget = nullptr;  // forget() as a Python callable, the weak references' callback
};
State state;  // touched under the GIL only

// Drops `entry`, releasing its references last (a backend's release may run Python code, or
// end its context).
void clear(GroupEntry& entry) {
  GroupEntry old = std::exchange(entry, GroupEntry{});
  Py_XDECREF(old.ref);
  Py_XDECREF(old.backend);
}

// The weak references' callback: their group is going.
PyObject* forget(PyObject*, PyObject* ref) {
  for (GroupEntry& entry : state.groups) {
    if (entry.ref == ref) clear(entry);
  }
  Py_RETURN_NONE;
}

PyMethodDef forgetDef = {"_fast_forget", forget, METH_O,
                         "For collx.torch.all_reduce's cache: its group went."};

// torch's RedOpType value of `op` into `value`; false with an exception set.
bool opValueOf(PyObject* op, long& value) {
  if (PyUnicode_Check(op)) {
    // Identity first: a name written in the caller's code is interned, as these are.
    for (std::size_t i = 0; i < kOpNames.size(); ++i) {
      if (op == state.names[i]) {
        value = static_cast<long>(i);
        return true;
      }
    }
    for (std::size_t i = 0; i < kOpNames.size(); ++i) {
      if (PyUnicode_CompareWithASCIIString(op, kOpNames[i]) == 0) {
        value = static_cast<long>(i);
        return true;
      }
    }
    PyErr_Format(PyExc_ValueError, "op %R is none of %s", op, kOpList);
    return false;
  }
  for (const OpEntry& entry : state.ops) {
    if (entry.op == op) {
      value = entry.value;
      return true;
    }
  }
  PyObject* result = PyObject_CallOneArg(state.opValue, op);
  if (result == nullptr) return false;
  value = PyLong_AsLong(result);
  Py_DECREF(result);
  if (value == -1 && PyErr_Occurred()) return false;
  OpEntry& entry = state.ops[state.nextOp];
  state.nextOp = (state.nextOp + 1) % state.ops.size();
  PyObject* old = std::exchange(entry.op, Py_NewRef(op));
  entry.value = value;
  Py_XDECREF(old);
  return true;
}

// The ProcessGroupCollx of `group` (not None), from the cache or through collx.torch's
// backend_of; nullptr with an exception set. `held` gets a new reference that keeps it
// alive through the call (another thread may destroy the group meanwhile).
ProcessGroupCollx* backendOf(PyObject* group, PyObject** held) {
  for (const GroupEntry& entry : state.groups) {
    if (entry.group == group) {
      *held = Py_NewRef(entry.backend != nullptr ? entry.backend : group);
      return entry.pg;
    }
  }
  PyObject* backend = PyObject_CallOneArg(state.backendOf, group);
  if (backend == nullptr) return nullptr;
  ProcessGroupCollx* pg = nullptr;
  try {
    pg = py::handle(backend).cast<ProcessGroupCollx*>();
  } catch (const py::cast_error&) {
    PyErr_Format(PyExc_TypeError, "collx.torch.backend_of gave %.200s, not a ProcessGroupCollx",
                 Py_TYPE(backend)->tp_name);
  }
  PyObject* ref = pg != nullptr ? PyWeakref_NewRef(group, state.forget) : nullptr;
  if (ref == nullptr) {
    Py_DECREF(backend);
    return nullptr;
  }
  GroupEntry& entry = state.groups[state.nextGroup];
  state.nextGroup = (state.nextGroup + 1) % state.groups.size();
  GroupEntry old = std::exchange(entry, GroupEntry{group, ref, nullptr, pg});
  if (backend != group) entry.backend = Py_NewRef(backend);
  *held = backend;
  clear(old);
  return pg;
}

// The arguments by name: tensor, op, group (op and group optional).
bool parse(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames,
           std::array<PyObject*, 3>& out) {
  if (nargs > 3) {
    PyErr_Format(PyExc_TypeError,
                 "all_reduce() takes from 1 to 3 positional arguments but %zd were given", nargs);
    return false;
  }
  for (Py_ssize_t i = 0; i < nargs; ++i) out[i] = args[i];
  const Py_ssize_t nkw = kwnames != nullptr ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t k = 0; k < nkw; ++k) {
    PyObject* name = PyTuple_GET_ITEM(kwnames, k);
    std::size_t i = 0;
    while (i < out.size() && name != state.keywords[i]) ++i;
    if (i == out.size()) {
      i = 0;
      while (i < out.size() && PyUnicode_Compare(name, state.keywords[i]) != 0) ++i;
    }
    if (i == out.size()) {
      PyErr_Format(PyExc_TypeError, "all_reduce() got an unexpected keyword argument '%U'", name);
      return false;
    }
    if (out[i] != nullptr) {
      PyErr_Format(PyExc_TypeError, "all_reduce() got multiple values for argument '%U'", name);
      return false;
    }
    out[i] = args[nargs + k];
  }
  if (out[0] == nullptr) {
    PyErr_SetString(PyExc_TypeError,
                    "all_reduce() missing 1 required positional argument: 'tensor'");
    return false;
  }
  return true;
}

PyObject* allReduceEntry(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  if (state.backendOf == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "import collx.torch first (it sets this entry up)");
    return nullptr;
  }
  std::array<PyObject*, 3> given{};
  if (!parse(args, nargs, kwnames, given)) return nullptr;
  PyObject* tensor = given[0];
  long op = 0;
  if (given[1] != nullptr && !opValueOf(given[1], op)) return nullptr;
  // The default group: None until init_process_group, when backend_of says so as torch does.
  PyObject* group = given[2] != nullptr && given[2] != Py_None
                        ? Py_NewRef(given[2])
                        : PyObject_GetAttr(state.defaultOwner, state.defaultName);
  if (group == nullptr) return nullptr;
  if (state.isCompiling != Py_None) {
    // torch.compiler.is_compiling(), or the flag it returns read straight (a module
    // attribute: 50 ns less than the call) where collx.torch found that to be all it does.
    PyObject* compiling = PyTuple_Check(state.isCompiling)
                              ? PyObject_GetAttr(PyTuple_GET_ITEM(state.isCompiling, 0),
                                                 PyTuple_GET_ITEM(state.isCompiling, 1))
                              : PyObject_CallNoArgs(state.isCompiling);
    const int yes = compiling != nullptr ? PyObject_IsTrue(compiling) : -1;
    Py_XDECREF(compiling);
    if (yes != 0) {
      PyObject* result = nullptr;
      if (yes > 0) {
        PyObject* value = PyLong_FromLong(op);
        if (value != nullptr) {
          std::array<PyObject*, 3> call = {tensor, value, group};
          result = PyObject_Vectorcall(state.compiling, call.data(), call.size(), nullptr);
          Py_DECREF(value);
        }
      }
      Py_DECREF(group);
      return result;
    }
  }
  PyObject* held = nullptr;
  ProcessGroupCollx* pg = backendOf(group, &held);
  Py_DECREF(group);
  if (pg == nullptr) return nullptr;
  if (!THPVariable_Check(tensor)) {
    Py_DECREF(held);
    PyErr_Format(PyExc_TypeError, "all_reduce(): tensor must be a torch.Tensor, not %.200s",
                 Py_TYPE(tensor)->tp_name);
    return nullptr;
  }
  const bool done = allReduceReleased(pg, THPVariable_Unpack(tensor), op);
  Py_DECREF(held);
  if (done) return Py_NewRef(tensor);
  PyObject* raised = PyObject_CallNoArgs(state.raiseLast);  // raises it: nullptr
  Py_XDECREF(raised);
  if (raised != nullptr) PyErr_SetString(PyExc_SystemError, "all_reduce(): a lost error");
  return nullptr;
}

// _fast_setup(op_value, backend_of, compiling, is_compiling, default_owner, default_name,
// raise_last): collx.torch's helpers for allReduceEntry (once per load of collx.torch; a
// reload's replace the earlier ones).
PyObject* setup(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 7 || !PyUnicode_Check(args[5])) {
    PyErr_SetString(PyExc_TypeError,
                    "_fast_setup(op_value, backend_of, compiling, is_compiling, default_owner, "
                    "default_name, raise_last)");
    return nullptr;
  }
  if (state.forget == nullptr) {
    for (std::size_t i = 0; i < kOpNames.size(); ++i) {
      state.names[i] = PyUnicode_InternFromString(kOpNames[i]);
      if (state.names[i] == nullptr) return nullptr;
    }
    const std::array<const char*, 3> keywords = {"tensor", "op", "group"};
    for (std::size_t i = 0; i < keywords.size(); ++i) {
      state.keywords[i] = PyUnicode_InternFromString(keywords[i]);
      if (state.keywords[i] == nullptr) return nullptr;
    }
    state.forget = PyCFunction_New(&forgetDef, nullptr);
    if (state.forget == nullptr) return nullptr;
  }
  PyObject* name = Py_NewRef(args[5]);
  PyUnicode_InternInPlace(&name);
  std::array<PyObject**, 7> slots = {&state.opValue,     &state.backendOf,    &state.compiling,
                                     &state.isCompiling, &state.defaultOwner, &state.defaultName,
                                     &state.raiseLast};
  for (std::size_t i = 0; i < slots.size(); ++i) {
    PyObject* old = std::exchange(*slots[i], i == 5 ? name : Py_NewRef(args[i]));
    Py_XDECREF(old);
  }
  Py_RETURN_NONE;
}

}  // namespace fast

// _all_reduce_at(address, tensor, op): the call alone, as collx.torch.all_reduce made it
// before allReduceEntry (its Python path, _all_reduce_py: what torch.compile traces, and the
// benchmarks' comparison). Returns None when done; on an error, False, the error kept for
// this thread, which _raise_last() raises through pybind11's translation.
PyObject* allReduceAt(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 3 || !THPVariable_Check(args[1]) || !PyLong_Check(args[2])) {
    PyErr_SetString(PyExc_TypeError, "_all_reduce_at(address, tensor, op)");
    return nullptr;
  }
  auto* pg = static_cast<ProcessGroupCollx*>(PyLong_AsVoidPtr(args[0]));
  const long op = PyLong_AsLong(args[2]);
  if (pg == nullptr || PyErr_Occurred()) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "a null group address");
    return nullptr;
  }
  if (allReduceReleased(pg, THPVariable_Unpack(args[1]), op)) Py_RETURN_NONE;
  Py_RETURN_FALSE;
}

PyMethodDef fastMethods[] = {
    {"all_reduce",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(fast::allReduceEntry)),
     METH_FASTCALL | METH_KEYWORDS,
     "all_reduce($module, tensor, op='sum', group=None)\n--\n\n"
     "collx's fastest all_reduce for a torch user: ``tensor`` (a contiguous CPU tensor) "
     "reduced in place over ``group`` (default: the default group, whose backend must be "
     "collx), blocking, like ``dist.all_reduce(tensor, op, group)`` but without torch's "
     "dispatch, Work and future around the call: for the many small calls of CPU "
     "tensor-parallel inference. Inside a function compiled with torch.compile it is the op "
     "``torch.ops.collx.all_reduce_`` (torch 2.4 on), which the graph captures. ``op`` is a "
     "name, as functional collectives take it (\"sum\", \"avg\", \"product\", \"min\", "
     "\"max\", \"band\", \"bor\", \"bxor\"), or a dist.ReduceOp (not inside a compiled "
     "function). Returns ``tensor``. Errors are collx's (collx.InvalidArgument, collx.IoError, "
     "...)."},
    {"_fast_setup", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(fast::setup)),
     METH_FASTCALL,
     "_fast_setup(op_value, backend_of, compiling, is_compiling, default_owner, default_name, "
     "raise_last)\n\nFor collx.torch: the Python helpers of all_reduce (its rare paths)."},
    {"_all_reduce_at", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(allReduceAt)),
     METH_FASTCALL,
     "_all_reduce_at(address, tensor, op)\n\nFor collx.torch._all_reduce_py: the all_reduce of "
     "ProcessGroupCollx.all_reduce_ on the group at address (ProcessGroupCollx._address()); "
     "None when done, False on an error (raised by _raise_last())."},
    {nullptr, nullptr, 0, nullptr}};

}  // namespace collx::torch_backend

PYBIND11_MODULE(_collx_torch, m) {
  using collx::torch_backend::ProcessGroupCollx;
  m.doc() = "The torch.distributed backend 'collx' (import collx.torch to register it).";
  // The Python type of c10d's backend class must be registered before ours derives from it.
  py::module_::import("torch.distributed");
  py::class_<ProcessGroupCollx, collx::torch_backend::BackendBase,
             c10::intrusive_ptr<ProcessGroupCollx>>(
      m, "ProcessGroupCollx",
      "A c10d ProcessGroup over a collx context. torch.distributed creates it through the "
      "backend registered by import collx.torch; it can also be made directly.")
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout) {
             return c10::make_intrusive<ProcessGroupCollx>(store, rank, size, timeout);
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"),
           py::arg("timeout") = std::chrono::milliseconds(30 * 60 * 1000),
           py::call_guard<py::gil_scoped_release>(),
           "ProcessGroupCollx(store, rank, size, timeout=timedelta(minutes=30))\n\nJoins the "
           "group through a c10d store (the one torch's rendezvous made) and connects to every "
           "rank; timeout bounds joining and every call.")
      .def(
          "abort", [](ProcessGroupCollx& pg, const std::string& why) { pg.context().abort(why); },
          py::arg("why") = "the group was aborted (ProcessGroupCollx.abort)",
          "abort(why=...)\n\nEnds every call of this group on this rank at once: each blocked "
          "call, and every later one, raises collx.Aborted with `why`. Thread-safe: a "
          "watchdog thread may call it while the main thread is blocked in a collective.")
      .def("reform", &ProcessGroupCollx::reform, py::arg("timeout"),
           py::arg("replacement_wait") = std::chrono::milliseconds(0),
           py::call_guard<py::gil_scoped_release>(),
           "reform(timeout, replacement_wait=timedelta(0)) -> (failed, joined)\n\nAfter a "
           "failure, on every live rank: the group's context re-forms (collx.Context.reform) "
           "with the newcomers (collx-run --on-failure replace's replacements, whose first "
           "group joins) in the failed ranks' places, and this group goes on in place, with "
           "the same ranks, and so do the groups split from it (torch's sub-groups: split "
           "again, in the order they were made, as a newcomer's new_group calls make them). "
           "Raises collx.InvalidArgument when a failed rank found no newcomer "
           "(a torch group keeps its size).")
      .def("split", &ProcessGroupCollx::split, py::arg("ranks"), py::arg("name"),
           py::arg("timeout") = std::chrono::milliseconds(30 * 60 * 1000),
           py::call_guard<py::gil_scoped_release>(),
           "split(ranks, name, timeout=timedelta(minutes=30))\n\nA group of ranks (this "
           "group's; a rank's place in the list is its rank there) over this group's "
           "connections, with no rendezvous: collx.Context.split. collx.torch makes torch's "
           "sub-groups (new_group, DeviceMesh) this way.")
      .def_property_readonly(
          "transports", [](ProcessGroupCollx& pg) { return pg.context().transports(); },
          "The collx transport to each rank ('self', 'tcp').")
      .def_property_readonly(
          "joined", [](ProcessGroupCollx& pg) { return pg.joined(); },
          "Whether this group joined a running job as a newcomer (a replacement that "
          "collx-run started with COLLX_JOIN=1) rather than forming a job.")
      .def_property_readonly(
          "shared_memory", [](ProcessGroupCollx& pg) { return pg.context().sharedMemory(); },
          "Whether the shared-memory algorithms run in this group: every rank on one host "
          "(a split's too, in a shared-memory group of its own: collx.Context.split).")
      // The op as torch's RedOpType value: converting a dist.ReduceOp object costs torch 2.x
      // about a microsecond per call (an implicit conversion), more than the call itself.
      .def(
          "all_reduce_",
          [](ProcessGroupCollx& pg, const at::Tensor& t, int op) {
            pg.allReduceNow(t, static_cast<c10d::ReduceOp::RedOpType>(op));
          },
          py::arg("tensor"), py::arg("op") = 0, py::call_guard<py::gil_scoped_release>(),
          "all_reduce_(tensor, op=0)\n\nAn all_reduce of a CPU tensor in place, blocking, "
          "with no torch dispatch, Work or future around it: collx.torch.all_reduce's eager "
          "path. op is torch's RedOpType value (0 for SUM; collx.torch.all_reduce takes "
          "dist.ReduceOp and names).")
      .def(
          "_address", [](ProcessGroupCollx& pg) { return reinterpret_cast<std::uintptr_t>(&pg); },
          "For collx.torch.all_reduce's cache: this group's address, for _all_reduce_at "
          "(valid while the group lives).")
      .def("_time_own_all_reduce", &ProcessGroupCollx::timeOwnAllReduce, py::arg("tensor"),
           py::arg("iterations"), py::call_guard<py::gil_scoped_release>(),
           "For the benchmarks: collx's own blocking allreduce (sum) of tensor, iterations "
           "times in a row on this group's context, with no Python or torch around it; the "
           "seconds of each call.")
      .def(
          "dump_state", [](ProcessGroupCollx& pg) { return pg.context().dumpState(); },
          py::call_guard<py::gil_scoped_release>(),
          "A hang report now, as collx.Context.dump_state(): every rank's calls joined into "
          "one diagnosis (text). For the group torch made: "
          "dist.distributed_c10d._get_default_group()._get_backend(torch.device('cpu'))"
          ".dump_state(), or collx.torch.dump_state().");
  if (PyModule_AddFunctions(m.ptr(), collx::torch_backend::fastMethods) != 0) {
    throw py::error_already_set();
  }
  m.def(
      "_raise_last",
      []() {
        std::exception_ptr error = std::exchange(collx::torch_backend::lastError, nullptr);
        if (error) std::rethrow_exception(error);
      },
      "_raise_last()\n\nFor collx.torch.all_reduce: raises the error the call kept for "
      "this thread (collx's exception classes), if any.");
  m.def(
      "_split_groups",
      []() -> py::object {
        const std::optional<bool> split = collx::kTorchSplit.get(collx::Config::process());
        return split ? py::object(py::bool_(*split)) : py::object(py::none());
      },
      "_split_groups()\n\nFor collx.torch: COLLX_TORCH_SPLIT, whether sub-groups split the "
      "default group's context (None: automatic).");
  // For the tests (test_torch_backend.py compares it with collx._collx._mapping): how the
  // backend moves `tensor` and, with `op`, reduces it.
  m.def(
      "_mapping",
      [](const at::Tensor& tensor, py::object op) {
        using namespace collx;
        const Where where{-1, "mapping", -1};
        if (op.is_none()) {
          const torch_backend::Flat f = torch_backend::flatOf(tensor, "the array", where);
          return py::make_tuple(dataTypeName(f.dtype), f.perElement, py::none());
        }
        // dist.ReduceOp.SUM converts to a ReduceOp; dist.ReduceOp.PREMUL_SUM is a bare
        // RedOpType (which torch 2.x's isinstance takes for a ReduceOp all the same).
        c10d::ReduceOp reduceOp;
        try {
          reduceOp = op.cast<c10d::ReduceOp>();
        } catch (const py::cast_error&) {
          reduceOp.op_ = static_cast<c10d::ReduceOp::RedOpType>(py::int_(op).cast<int>());
        }
        const torch_backend::Flat f =
            torch_backend::flatOf(tensor, "the array", where, reduceOp.op_);
        return py::make_tuple(
            dataTypeName(f.dtype), f.perElement,
            torch_backend::reduceOpOf(reduceOp, tensor.scalar_type(), where).name());
      },
      py::arg("tensor"), py::arg("op") = py::none(),
      "_mapping(tensor, op=None)\n\nFor the tests: (collx type, units per element, op applied) "
      "of a call that moves tensor and, with op, reduces it; raises what such a call would.");
}
