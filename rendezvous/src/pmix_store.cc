#include "collx/rendezvous/pmix_store.h"

#include <openssl/sha.h>

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "collx/base/config.h"
#include "collx_rendezvous_config.h"
#if COLLX_HAVE_PMIX
#include <pmix.h>
#endif

namespace collx::rendezvous {

bool pmixBuilt() { return COLLX_HAVE_PMIX != 0; }

std::optional<std::string> pmixServerIn(const Config& config) {
  auto nspace = config.env("PMIX_NAMESPACE");
  auto rank = config.env("PMIX_RANK");
  if (!nspace || !rank) return std::nullopt;
  // PMIx clients of every version look for the URI of theirs or an older one.
  static const char* const kUris[] = {"PMIX_SERVER_URI41", "PMIX_SERVER_URI4", "PMIX_SERVER_URI3",
                                      "PMIX_SERVER_URI21", "PMIX_SERVER_URI2"};
  for (const char* uri : kUris) {
    if (config.env(uri)) {
      return "PMIX_NAMESPACE=" + *nspace + ", PMIX_RANK=" + *rank + ", " + uri;
    }
  }
  return std::nullopt;
}

#if COLLX_HAVE_PMIX

namespace {

const Where kWhere{-1, "PMIx", -1};

std::string statusText(pmix_status_t status) { return PMIx_Error_string(status); }

// The process's connection to its PMIx server: made by the first user, ended by
// pmixDisconnect() or at exit. PMIx_Init runs on a thread of its own, so that a server that
// does not answer costs the caller its deadline, not its life; one that answers late still
// leaves a connection that pmixDisconnect() and exit end.
struct Client {
  std::mutex mutex;
  std::condition_variable changed;
  enum class State { kIdle, kConnecting, kConnected } state = State::kIdle;
  pmix_status_t failure = PMIX_SUCCESS;  // the last PMIx_Init's error
  bool exitHook = false;
  pmix_proc_t me{};
};

Client& client() {
  static Client* instance = new Client();  // outlives every static destructor, for atexit
  return *instance;
}

void disconnectAtExit() { pmixDisconnect(); }

pmix_proc_t connect(const Where& where, Clock::time_point deadline) {
  Client& c = client();
  std::unique_lock<std::mutex> lock(c.mutex);
  if (c.state == Client::State::kIdle) {
    c.state = Client::State::kConnecting;
    std::thread([&c] {
      pmix_proc_t me{};
      const pmix_status_t status = PMIx_Init(&me, nullptr, 0);
      {
        std::lock_guard<std::mutex> guard(c.mutex);
        c.failure = status;
        c.state = status == PMIX_SUCCESS ? Client::State::kConnected : Client::State::kIdle;
        if (status == PMIX_SUCCESS) c.me = me;
        if (status == PMIX_SUCCESS && !c.exitHook) {
          c.exitHook = true;
          std::atexit(disconnectAtExit);
        }
      }
      c.changed.notify_all();
    }).detach();
  }
  const auto server = [] { return pmixServerIn(Config::process()).value_or("PMIX_* variables"); };
  if (!c.changed.wait_until(lock, deadline,
                            [&c] { return c.state != Client::State::kConnecting; })) {
    throw TimeoutError(where,
                       "PMIx_Init did not return in time: the PMIx server the "
                       "environment names (" +
                           server() + ") does not answer");
  }
  if (c.state == Client::State::kConnected) return c.me;
  throw IoError(where, "PMIx_Init failed: " + statusText(c.failure) +
                           " (the environment names a PMIx server: " + server() +
                           "; a job started by mpirun or srun --mpi=pmix has one; outside "
                           "such a job, unset the PMIX_* variables or set COLLX_STORE)");
}

// A value as PMIx_Get returned it: bytes (a byte object or a string) or an integer.
struct Value {
  bool number = false;
  std::int64_t integer = 0;
  Bytes bytes;
};

// One PMIx_Get_nb in flight. The caller and PMIx's callback each hold it; the last to let
// go deletes it, so that a caller that stopped waiting at its deadline leaves PMIx a live
// object to answer into, and the process, key and information PMIx still reads.
struct PendingGet {
  pmix_proc_t proc{};
  std::string key;
  std::mutex mutex;
  std::condition_variable answered;
  bool done = false;
  pmix_status_t status = PMIX_ERROR;
  Value value;
  pmix_info_t* info = nullptr;
  std::size_t ninfo = 0;
  std::atomic<int> holders{2};

  ~PendingGet() {
    if (info != nullptr) PMIX_INFO_FREE(info, ninfo);
  }
  void release() {
    if (holders.fetch_sub(1) == 1) delete this;
  }
};

void onValue(pmix_status_t status, pmix_value_t* kv, void* cbdata) {
  auto* pending = static_cast<PendingGet*>(cbdata);
  {
    std::lock_guard<std::mutex> lock(pending->mutex);
    pending->status = status;
    if (status == PMIX_SUCCESS && kv != nullptr) {
      Value& out = pending->value;
      switch (kv->type) {
        case PMIX_BYTE_OBJECT:
          out.bytes.assign(kv->data.bo.bytes, kv->data.bo.bytes + kv->data.bo.size);
          break;
        case PMIX_STRING:
          if (kv->data.string != nullptr) out.bytes = toBytes(kv->data.string);
          break;
        case PMIX_UINT8:
          out = {true, kv->data.uint8, {}};
          break;
        case PMIX_UINT16:
          out = {true, kv->data.uint16, {}};
          break;
        case PMIX_UINT32:
          out = {true, kv->data.uint32, {}};
          break;
        case PMIX_UINT64:
          out = {true, static_cast<std::int64_t>(kv->data.uint64), {}};
          break;
        case PMIX_INT:
          out = {true, kv->data.integer, {}};
          break;
        case PMIX_INT32:
          out = {true, kv->data.int32, {}};
          break;
        case PMIX_SIZE:
          out = {true, static_cast<std::int64_t>(kv->data.size), {}};
          break;
        case PMIX_PROC_RANK:
          out = {true, kv->data.rank, {}};
          break;
        default:
          pending->status = PMIX_ERR_TYPE_MISMATCH;
          break;
      }
    }
    pending->done = true;
  }
  pending->answered.notify_all();
  pending->release();
}

// PMIx_Get of `proc`'s `key`, answered by `deadline` (the server is told the same in whole
// seconds). `immediate`: ask no other host. Returns PMIx's status; PMIX_ERR_TIMEOUT when the
// deadline passed first.
pmix_status_t getValue(const pmix_proc_t& proc, const std::string& key, Clock::time_point deadline,
                       bool immediate, Value& out, bool optional = false) {
  auto* pending = new PendingGet();
  pending->proc = proc;
  pending->key = key;
  const auto left = std::chrono::duration<double>(deadline - Clock::now()).count();
  int seconds = std::max(1, static_cast<int>(std::ceil(left)));
  bool yes = true;
  pending->ninfo = 1 + (immediate ? 1 : 0) + (optional ? 1 : 0);
  PMIX_INFO_CREATE(pending->info, pending->ninfo);
  std::size_t n = 0;
  PMIX_INFO_LOAD(&pending->info[n++], PMIX_TIMEOUT, &seconds, PMIX_INT);
  if (immediate) PMIX_INFO_LOAD(&pending->info[n++], PMIX_IMMEDIATE, &yes, PMIX_BOOL);
  // Job information that the server has or not: no request to the host for it.
  if (optional) PMIX_INFO_LOAD(&pending->info[n++], PMIX_OPTIONAL, &yes, PMIX_BOOL);
  pmix_status_t status = PMIx_Get_nb(&pending->proc, pending->key.c_str(), pending->info,
                                     pending->ninfo, onValue, pending);
  if (status != PMIX_SUCCESS) {  // no callback will come: both holders' share is ours
    delete pending;
    return status;
  }
  {
    std::unique_lock<std::mutex> lock(pending->mutex);
    if (!pending->answered.wait_until(lock, deadline, [&] { return pending->done; })) {
      lock.unlock();
      pending->release();
      return PMIX_ERR_TIMEOUT;
    }
    status = pending->status;
    if (status == PMIX_SUCCESS) out = std::move(pending->value);
  }
  pending->release();
  return status;
}

// A number of the job's (PMIX_JOB_SIZE, ...): of `rank`, or of the whole job.
std::optional<std::int64_t> jobNumber(const pmix_proc_t& me, pmix_rank_t rank, const char* key,
                                      Clock::time_point deadline, bool required) {
  pmix_proc_t proc;
  PMIX_LOAD_PROCID(&proc, me.nspace, rank);
  Value value;
  const pmix_status_t status = getValue(proc, key, deadline, false, value, !required);
  if (status == PMIX_SUCCESS && value.number) return value.integer;
  if (!required) return std::nullopt;
  const Where where{static_cast<int>(me.rank), "PMIx", -1};
  const std::string of = std::string(key) + " of namespace " + me.nspace;
  if (status == PMIX_ERR_TIMEOUT) {
    throw TimeoutError(where, "the PMIx server did not answer " + of + " in time");
  }
  throw IoError(where, "the PMIx server did not give " + of + ": " +
                           (status == PMIX_SUCCESS ? "not a number" : statusText(status)));
}

}  // namespace

void pmixDisconnect() {
  Client& c = client();
  std::lock_guard<std::mutex> lock(c.mutex);
  if (c.state != Client::State::kConnected) return;
  c.state = Client::State::kIdle;
  PMIx_Finalize(nullptr, 0);
}

PmixJob pmixJob(std::chrono::milliseconds timeout) {
  const Clock::time_point deadline = Clock::now() + timeout;
  const pmix_proc_t me = connect(kWhere, deadline);
  PmixJob job;
  job.nspace = me.nspace;
  job.rank = static_cast<int>(me.rank);
  job.size = static_cast<int>(*jobNumber(me, PMIX_RANK_WILDCARD, PMIX_JOB_SIZE, deadline, true));
  if (auto local = jobNumber(me, me.rank, PMIX_LOCAL_RANK, deadline, false)) {
    job.localRank = static_cast<int>(*local);
  }
  if (auto local = jobNumber(me, PMIX_RANK_WILDCARD, PMIX_LOCAL_SIZE, deadline, false)) {
    job.localSize = static_cast<int>(*local);
  }
  job.version = PMIx_Get_version();
  if (job.size < 1 || job.rank < 0 || job.rank >= job.size) {
    throw IoError(kWhere, "the PMIx server gives rank " + std::to_string(job.rank) +
                              " of a job of " + std::to_string(job.size) + " (namespace " +
                              job.nspace + ")");
  }
  return job;
}

std::string pmixRank0Value(const std::string& scope, const std::string& value,
                           const StoreOptions& options) {
  PmixStore store(options, 0, scope);
  store.setRank(store.job().rank);
  if (store.job().rank == 0) {
    store.set("value", value);
    return value;
  }
  return toString(store.get("value"));
}

PmixStore::PmixStore(const StoreOptions& options, int writer, std::string scope)
    : Store(options), job_(pmixJob(timeout())), writer_(writer), scope_(std::move(scope)) {
  if (writer_ < 0 || writer_ >= job_.size) {
    throw InvalidArgument(where("open"), "writer rank " + std::to_string(writer_) +
                                             " is outside the job's [0, " +
                                             std::to_string(job_.size) + ")");
  }
}

PmixStore::~PmixStore() = default;

std::string PmixStore::describe() const {
  return "pmix://" + job_.nspace + " (rank " + std::to_string(writer_) + "'s values)";
}

std::string PmixStore::pmixKey(const std::string& key) const {
  std::string full = "collx." + scope_ + key;
  if (full.size() < PMIX_MAX_KEYLEN) return full;
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(full.data()), full.size(), digest);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "collx.#";
  for (unsigned char byte : digest) {
    out += kHex[byte >> 4];
    out += kHex[byte & 15];
  }
  return out;
}

void PmixStore::unsupported(const char* op) const {
  throw Unsupported(where(op), std::string("a PMIx store offers set, get, wait and check only: "
                                           "PMIx has no atomic update or deletion of put values"));
}

void PmixStore::doSet(const std::string& key, const Bytes& value) {
  if (job_.rank != writer_) {
    throw InvalidArgument(where("set"),
                          "only rank " + std::to_string(writer_) +
                              " sets values in this PMIx store (PMIx keeps a value under the "
                              "process that put it, and readers ask that process's data)");
  }
  pmix_value_t pv;
  PMIX_VALUE_CONSTRUCT(&pv);
  pv.type = PMIX_BYTE_OBJECT;
  pv.data.bo.bytes = const_cast<char*>(reinterpret_cast<const char*>(value.data()));
  pv.data.bo.size = value.size();
  pmix_status_t status = PMIx_Put(PMIX_GLOBAL, pmixKey(key).c_str(), &pv);  // copies the value
  if (status == PMIX_SUCCESS) status = PMIx_Commit();
  if (status != PMIX_SUCCESS) {
    throw IoError(where("set"), "PMIx_Put/PMIx_Commit of key " + key + ": " + statusText(status));
  }
}

std::vector<std::string> PmixStore::doMultiGet(const std::vector<std::string>& keys,
                                               Clock::time_point deadline,
                                               std::vector<Bytes>& values) {
  pmix_proc_t writer;
  PMIX_LOAD_PROCID(&writer, job_.nspace.c_str(), static_cast<pmix_rank_t>(writer_));
  values.clear();
  std::vector<std::string> missing;
  for (const std::string& key : keys) {
    Value value;
    pmix_status_t status;
    // A server that answers "not found" instead of waiting for the key is asked again.
    while ((status = getValue(writer, pmixKey(key), deadline, false, value)) ==
               PMIX_ERR_NOT_FOUND &&
           Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (status == PMIX_SUCCESS) {
      if (value.number) throw IoError(where("get"), "key " + key + " holds a number, not bytes");
      values.push_back(std::move(value.bytes));
    } else if (status == PMIX_ERR_TIMEOUT || status == PMIX_ERR_NOT_FOUND) {
      missing.push_back(key);
    } else {
      throw IoError(where("get"), "PMIx_Get of rank " + std::to_string(writer_) + "'s key " + key +
                                      ": " + statusText(status));
    }
  }
  return missing;
}

std::vector<std::string> PmixStore::doWait(const std::vector<std::string>& keys,
                                           Clock::time_point deadline) {
  std::vector<Bytes> values;
  return doMultiGet(keys, deadline, values);
}

bool PmixStore::doCheck(const std::vector<std::string>& keys) {
  pmix_proc_t writer;
  PMIX_LOAD_PROCID(&writer, job_.nspace.c_str(), static_cast<pmix_rank_t>(writer_));
  for (const std::string& key : keys) {
    Value value;
    const pmix_status_t status =
        getValue(writer, pmixKey(key), Clock::now() + timeout(), true, value);
    if (status != PMIX_SUCCESS) return false;
  }
  return true;
}

std::int64_t PmixStore::doAdd(const std::string&, std::int64_t) { unsupported("add"); }
Bytes PmixStore::doCompareSet(const std::string&, const Bytes&, const Bytes&) {
  unsupported("compareSet");
}
bool PmixStore::doErase(const std::string&) { unsupported("erase"); }

#else  // !COLLX_HAVE_PMIX

namespace {
[[noreturn]] void notBuilt(const Where& where) {
  throw Unsupported(where,
                    "this build has no PMIx (configure with COLLX_WITH_PMIX=ON and libpmix-dev "
                    "installed)");
}
}  // namespace

PmixJob pmixJob(std::chrono::milliseconds) { notBuilt(Where{-1, "PMIx", -1}); }
void pmixDisconnect() {}
std::string pmixRank0Value(const std::string&, const std::string&, const StoreOptions&) {
  notBuilt(Where{-1, "PMIx", -1});
}

PmixStore::PmixStore(const StoreOptions& options, int writer, std::string scope)
    : Store(options), writer_(writer), scope_(std::move(scope)) {
  notBuilt(where("open"));
}
PmixStore::~PmixStore() = default;
std::string PmixStore::describe() const { return "pmix://"; }
std::string PmixStore::pmixKey(const std::string& key) const { return key; }
void PmixStore::unsupported(const char*) const { notBuilt(where("use")); }
void PmixStore::doSet(const std::string&, const Bytes&) { unsupported("set"); }
std::vector<std::string> PmixStore::doWait(const std::vector<std::string>&, Clock::time_point) {
  unsupported("wait");
}
std::vector<std::string> PmixStore::doMultiGet(const std::vector<std::string>&, Clock::time_point,
                                               std::vector<Bytes>&) {
  unsupported("get");
}
std::int64_t PmixStore::doAdd(const std::string&, std::int64_t) { unsupported("add"); }
Bytes PmixStore::doCompareSet(const std::string&, const Bytes&, const Bytes&) {
  unsupported("compareSet");
}
bool PmixStore::doCheck(const std::vector<std::string>&) { unsupported("check"); }
bool PmixStore::doErase(const std::string&) { unsupported("erase"); }

#endif  // COLLX_HAVE_PMIX

}  // namespace collx::rendezvous
