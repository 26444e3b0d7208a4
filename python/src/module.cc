// collx._collx: the module definition (see module.h for the files of its sections, and
// python/README.md for what Python sees).
#include "module.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "collx/base/config.h"
#include "collx/rendezvous/pmix_store.h"
#include "collx/transport/mesh.h"

namespace collx::python {

namespace {

std::shared_ptr<PyContext> initCall(py::handle rank, py::handle size, py::handle store,
                                    py::handle localRank, py::handle jobId, py::handle generation,
                                    py::handle timeout) {
  BootstrapOptions options;
  if (!rank.is_none()) options.rank = rank.cast<int>();
  if (!size.is_none()) options.worldSize = size.cast<int>();
  if (!localRank.is_none()) options.localRank = localRank.cast<int>();
  if (!store.is_none()) options.store = py::str(store).cast<std::string>();
  if (!jobId.is_none()) options.jobId = jobId.cast<std::string>();
  if (!generation.is_none()) options.generation = generation.cast<std::int64_t>();
  options.timeout = toDuration(timeout, Where{-1, "init", -1});
  std::shared_ptr<Context> context;
  {
    py::gil_scoped_release release;
    context = init(options);
  }
  return std::make_shared<PyContext>(std::move(context));
}

// For the tests (test_torch_backend.py compares it with the torch backend's): how a call
// would move `array` and, with `op`, reduce it: (collx type, units per element, op applied),
// or the InvalidArgument that refuses it.
py::tuple mapping(py::handle array, py::handle op) {
  const Where where{-1, "mapping", -1};
  Buffer buffer = Buffer::acquire(array, false, "the array", where);
  if (op.is_none()) {
    const Typed t = typeOf(buffer, std::nullopt, nullptr, "the array", where);
    return py::make_tuple(dataTypeName(t.dtype), t.scale, py::none());
  }
  const PyReduceOp pyOp = toReduceOp(op, where);
  const Typed t = typeOf(buffer, std::nullopt, &pyOp.op, "the array", where);
  return py::make_tuple(dataTypeName(t.dtype), t.scale,
                        bindings::opFor(pyOp.op, t.type, where).name());
}

py::object epochSeconds(const std::optional<FlightEntry::Time>& t) {
  if (!t) return py::none();
  return py::float_(std::chrono::duration<double>(t->time_since_epoch()).count());
}

py::list flightRecord(PyContext& s) {
  Context& c = s.ctx("flight_record");
  std::vector<FlightEntry> calls;
  {
    py::gil_scoped_release release;
    calls = c.flightRecord();
  }
  py::list out;
  for (const FlightEntry& e : calls) {
    py::dict d;
    d["id"] = e.id;
    d["seq"] = e.seq;
    d["collective"] = e.collective;
    d["name"] = e.name;
    d["algorithm"] = e.algorithm;
    d["dtype"] = dataTypeName(e.dtype);
    d["op"] = e.op;
    d["count"] = e.count;
    d["root"] = e.root;
    d["peer"] = e.peer;
    d["transports"] = e.transports;
    d["state"] = callStateName(e.state);
    d["waiting_for"] = e.waitingFor;
    d["waiting_what"] = e.waitingWhat;
    d["step"] = e.step;
    d["steps"] = e.steps;
    d["waiting_bytes"] = e.waitingBytes;
    d["started"] = epochSeconds(e.started);
    d["running"] = epochSeconds(e.running);
    d["waiting_since"] = epochSeconds(e.waitingSince);
    d["ended"] = epochSeconds(e.ended);
    d["duration_ms"] =
        e.ended ? py::object(py::float_(
                      std::chrono::duration<double, std::milli>(*e.ended - e.started).count()))
                : py::object(py::none());
    d["timeout_ms"] = e.timeout.count();
    d["error"] = e.error ? py::object(py::str(errorKindName(*e.error))) : py::object(py::none());
    d["error_text"] = e.errorText;
    d["describe"] = e.describe();
    out.append(d);
  }
  return out;
}

py::dict traffic(const MessageStats& m) {
  py::dict d;
  d["messages_sent"] = m.messagesSent;
  d["bytes_sent"] = m.bytesSent;
  d["messages_received"] = m.messagesReceived;
  d["bytes_received"] = m.bytesReceived;
  return d;
}

py::dict stats(PyContext& s) {
  const ContextStats st = s.ctx("stats").stats();
  py::dict out = traffic(st);
  out["calls"] = st.calls;
  out["failed_calls"] = st.failedCalls;
  out["waiting_s"] = std::chrono::duration<double>(st.waiting).count();
  out["shared_memory_waiting_s"] = std::chrono::duration<double>(st.sharedMemoryWaiting).count();
  out["collectives"] = st.collectives;
  py::list peers;
  for (const PeerStats& p : st.peers) {
    py::dict d = traffic(p);
    d["rank"] = p.rank;
    d["transport"] = p.transport;
    peers.append(d);
  }
  out["peers"] = peers;
  py::dict transports;
  for (const TransportStats& t : st.transports) {
    py::dict d = traffic(t);
    d["shared_calls"] = t.sharedCalls;
    d["shared_bytes"] = t.sharedBytes;
    transports[py::str(t.transport)] = d;
  }
  out["transports"] = transports;
  py::list algorithms;
  for (const AlgorithmStats& a : st.algorithms) {
    py::dict d;
    d["collective"] = a.collective;
    d["algorithm"] = a.algorithm;
    d["calls"] = a.calls;
    d["bytes"] = a.bytes;
    algorithms.append(d);
  }
  out["algorithms"] = algorithms;
  return out;
}

}  // namespace

PYBIND11_MODULE(_collx, m) {
  m.doc() =
      "collx: collective communication for CPU processes (the compiled part of the collx "
      "package; import collx).";
  defineErrors(m);
  defineTypes(m);
  defineWork(m);

  py::class_<PyContext, std::shared_ptr<PyContext>> context(
      m, "Context",
      "One rank's membership of a job (collx.init() makes one): its rank, the world size, its "
      "connections, and the collectives as methods. Every rank must call the same collectives "
      "in the same order with matching arguments. close() (or leaving a with block) ends it.");
  context
      .def_property_readonly(
          "rank", [](PyContext& s) { return s.ctx("rank").rank(); }, "This process's rank.")
      .def_property_readonly(
          "size", [](PyContext& s) { return s.ctx("size").size(); }, "The number of ranks.")
      .def_property_readonly(
          "local_rank", [](PyContext& s) { return s.ctx("local_rank").localRank(); },
          "The rank among this host's ranks (-1 when not given).")
      .def_property_readonly(
          "job_id", [](PyContext& s) { return s.ctx("job_id").jobId(); }, "The job's id.")
      .def_property_readonly(
          "generation", [](PyContext& s) { return s.ctx("generation").generation(); },
          "The job's generation (a job forms again under a new one).")
      .def_property_readonly(
          "timeout", [](PyContext& s) { return s.ctx("timeout").timeout().count() / 1000.0; },
          "The deadline of every call, in seconds.")
      .def_property_readonly(
          "transports", [](PyContext& s) { return s.ctx("transports").transports(); },
          "The transport of each peer ('self', 'shm', 'tcp'), indexed by rank.")
      .def_property_readonly(
          "shared_memory", [](PyContext& s) { return s.ctx("shared_memory").sharedMemory(); },
          "Whether every rank shares memory with every other (one host, all pairs over shm): "
          "the 'shm' algorithms can run.")
      .def_property_readonly(
          "peers",
          [](PyContext& s) {
            py::list out;
            for (const PeerInfo& p : s.ctx("peers").peers()) {
              py::dict d;
              d["rank"] = p.rank;
              d["hostname"] = p.hostname;
              d["pid"] = p.pid;
              d["local_rank"] = p.localRank;
              out.append(d);
            }
            return out;
          },
          "Every rank's join record (rank, hostname, pid, local_rank), indexed by rank.")
      .def("flight_record", &flightRecord,
           "The flight recorder: this context's last calls (COLLX_TRACE_BUFFER of them), oldest "
           "first, each a dict: id, seq, collective (bool), name, algorithm, dtype, op, count, "
           "root, peer, transports, state ('queued', 'running', 'waiting', 'completed', "
           "'failed'), waiting_for, waiting_what, step, steps, waiting_bytes, started, "
           "running, waiting_since, ended (epoch seconds or None), duration_ms, timeout_ms, "
           "error (the kind, e.g. 'TimeoutError', or None), error_text, describe. Empty when "
           "the recorder is off. Never blocks a call.")
      .def(
          "dump_state",
          [](PyContext& s) {
            Context& c = s.ctx("dump_state");
            py::gil_scoped_release release;
            return c.dumpState();
          },
          "A hang report now: every rank's flight recorder, summarized through the store "
          "(ranks answer from a watcher thread whatever they are doing) and joined into one "
          "diagnosis, returned as text (also logged, and written to COLLX_HANG_REPORT_DIR). "
          "Blocks up to about a second (GIL released).")
      .def("stats", &stats,
           "What this context has done since it connected, as a dict: calls, failed_calls, "
           "collectives (calls per collective), messages_sent, bytes_sent, messages_received, "
           "bytes_received, waiting_s and shared_memory_waiting_s (time spent asleep waiting "
           "for peers), peers (a list of dicts: rank, transport and the four counts), "
           "transports (by name: the four counts, shared_calls and shared_bytes of the 'shm' "
           "algorithms), algorithms (a list of dicts: collective, algorithm, calls, bytes). "
           "Never blocks a call.")
      .def_property_readonly(
          "trace_path", [](PyContext& s) { return s.ctx("trace_path").tracePath(); },
          "The trace file this rank writes (COLLX_TRACE), or '' when it writes none.")
      .def_property_readonly("closed", &PyContext::closed, "True after close().")
      .def(
          "describe_peer",
          [](PyContext& s, int peer) { return s.ctx("describe_peer").describePeer(peer); },
          py::arg("peer"), "A peer's connection, e.g. 'tcp 10.0.0.2:4321'.")
      .def(
          "abort",
          [](PyContext& s, const std::string& why) {
            Context& c = s.ctx("abort");
            py::gil_scoped_release release;
            c.abort(why);
          },
          py::arg("why") = "abort() was called",
          "Wakes every call in flight, which fails with collx.Aborted, as does every later call "
          "(thread-safe).")
      .def(
          "revoke",
          [](PyContext& s, const std::string& why) {
            Context& c = s.ctx("revoke");
            py::gil_scoped_release release;
            c.revoke(why);
          },
          py::arg("why") = "revoke() was called",
          "Revokes this generation of the context on every rank: every call in flight and every "
          "later one, here and on every live rank, raises collx.RevokedError naming this rank "
          "and `why` (thread-safe; the first revoke or failure wins).")
      .def(
          "agree",
          [](PyContext& s, std::uint64_t flags, py::handle timeout) {
            Context& c = s.ctx("agree");
            const auto bound = toDuration(timeout, Where{c.rank(), "agree", -1});
            Agreement a;
            {
              py::gil_scoped_release release;
              a = c.agree(flags, bound);
            }
            return py::make_tuple(a.flags, a.failed);
          },
          py::arg("flags") = ~std::uint64_t{0}, py::kw_only(), py::arg("timeout") = py::none(),
          "Agreement among the live ranks, on a failed or revoked context as on a healthy one: "
          "called by every live rank, returns to each the same (flags, failed): the AND of the "
          "flags of the ranks that took part, and the ranks found failed (died, connection "
          "closed, silent for COLLX_PEER_TIMEOUT, or not come by the deadline). Raises "
          "collx.ExcludedError on a rank the others agreed without. Through the store; any "
          "rank may die during it.")
      .def(
          "shrink",
          [](PyContext& s, py::handle timeout) {
            Context& c = s.ctx("shrink");
            const auto bound = toDuration(timeout, Where{c.rank(), "shrink", -1});
            std::shared_ptr<Context> next;
            {
              py::gil_scoped_release release;
              next = c.shrink(bound);
            }
            return std::make_shared<PyContext>(std::move(next));
          },
          py::kw_only(), py::arg("timeout") = py::none(),
          "shrink(*, timeout=None)\n\nThe survivors go on without the ranks that failed: "
          "called by every live rank, it agrees on who failed (collx.ExcludedError on a rank "
          "left out) and returns a context of the others, renumbered in their order, in the "
          "next generation, over the connections they have (no new connection or segment). "
          "This context is over afterwards: its calls raise collx.RevokedError. Raises "
          "collx.IoError when a survivor is lost meanwhile (call it again).")
      .def(
          "grow",
          [](PyContext& s, int count, py::handle timeout) {
            Context& c = s.ctx("grow");
            const auto bound = toDuration(timeout, Where{c.rank(), "grow", -1});
            std::shared_ptr<Context> next;
            {
              py::gil_scoped_release release;
              next = c.grow(count, bound);
            }
            return std::make_shared<PyContext>(std::move(next));
          },
          py::arg("count") = 1, py::kw_only(), py::arg("timeout") = py::none(),
          "grow(count=1, *, timeout=None)\n\nNewcomers join: called by every rank, it waits "
          "until count processes wait in collx.join() (collx.TimeoutError past timeout, and "
          "this context goes on) and returns a context of this one's ranks, then the "
          "newcomers, in the next generation. Only the newcomers open connections (tcp). A "
          "newcomer takes the place of a rank lost before (shrink()), or one kept beyond the "
          "job's first size when it formed with COLLX_MAX_SIZE set: at most as many join as "
          "there are such places.")
      .def(
          "reform",
          [](PyContext& s, py::handle timeout, py::handle replacementWait) {
            Context& c = s.ctx("reform");
            const Where where{c.rank(), "reform", -1};
            const auto bound = toDuration(timeout, where);
            const auto wait = toDuration(replacementWait, where);
            Reformed reformed;
            {
              py::gil_scoped_release release;
              reformed = c.reform(bound, wait);
            }
            py::dict causes;
            for (const FailedRank& f : reformed.causes) {
              causes[py::int_(f.rank)] = py::make_tuple(failureCauseName(f.cause), f.why);
            }
            return py::module_::import("collx").attr("Reformed")(
                std::make_shared<PyContext>(std::move(reformed.context)), reformed.failed,
                reformed.joined, reformed.rankOf, causes);
          },
          py::kw_only(), py::arg("timeout") = py::none(), py::arg("replacement_wait") = py::none(),
          "reform(*, timeout=None, replacement_wait=None) -> collx.Reformed (context, failed, "
          "joined, rank_of)\n\nRevoke (after a failure), agree, shrink and grow in one call, by "
          "every "
          "live rank: the newcomers waiting in collx.join(), or arriving within "
          "replacement_wait seconds (default 0), take the failed ranks' places, so that the "
          "others keep their ranks; failed ranks with no newcomer are left out. Returns the "
          "new context, the old ranks that failed, the new ranks that newcomers took, and "
          "each old rank's new rank (-1: failed), as a tuple; its causes attribute says why "
          "each failed rank failed, as this rank saw it: {rank: (cause, why)}, the cause "
          "killed, stopped, unreachable, excluded or unknown.")
      .def(
          "split",
          [](PyContext& s, const std::vector<int>& ranks, const std::string& name,
             py::handle timeout) {
            Context& c = s.ctx("split");
            const auto bound = toDuration(timeout, Where{c.rank(), "split", -1});
            std::shared_ptr<Context> sub;
            {
              py::gil_scoped_release release;
              sub = c.split(ranks, name, bound);
            }
            return std::make_shared<PyContext>(std::move(sub));
          },
          py::arg("ranks"), py::arg("name"), py::kw_only(), py::arg("timeout") = py::none(),
          "split(ranks, name, *, timeout=None)\n\nA sub-context of these ranks (a rank's place "
          "in the list is its rank there) over this context's connections, with no new "
          "rendezvous (as NCCL's comm split): every rank in ranks, and no other, calls it with "
          "the same list and name. Its collectives interleave freely with this context's. It "
          "shares this context's fate (an error or abort on either fails both); close() on "
          "it leaves the parent as it is. GIL released; bounded by timeout (seconds or a "
          "timedelta; default this context's).")
      .def("close", &PyContext::close,
           "Ends the context (waits for async calls whose Work was dropped). Idempotent.")
      .def("__enter__", [](std::shared_ptr<PyContext> s) { return s; })
      .def("__exit__", [](PyContext& s, py::args) { s.close(); })
      .def("__repr__", [](PyContext& s) {
        if (s.closed()) return std::string("<collx.Context (closed)>");
        Context& c = s.ctx("repr");
        return "<collx.Context rank " + std::to_string(c.rank()) + " of " +
               std::to_string(c.size()) + ", job " + c.jobId() + ">";
      });
  defineCollectives(context);

  m.def("init", &initCall, py::kw_only(), py::arg("rank") = py::none(),
        py::arg("size") = py::none(), py::arg("store") = py::none(),
        py::arg("local_rank") = py::none(), py::arg("job_id") = py::none(),
        py::arg("generation") = py::none(), py::arg("timeout") = py::none(),
        "init(*, rank=None, size=None, store=None, local_rank=None, job_id=None, "
        "generation=None, timeout=None)\n\nJoins a job and connects to every peer (GIL "
        "released; bounded by the timeout). Each value not given is taken from the "
        "environment: COLLX_RANK / COLLX_WORLD_SIZE / COLLX_STORE (collx-run sets them), "
        "torchrun's RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT, the PMIx server of mpirun or "
        "srun --mpi=pmix (when no store is set), Open MPI's, Slurm's; with nothing set, rank 0 "
        "of 1. store is a URL: tcp://host:port, file:///shared/dir, "
        "redis://host:port. timeout is in seconds (or a timedelta), else COLLX_TIMEOUT.");
  m.def(
      "join",
      [](py::handle store, py::handle jobId, py::handle timeout) {
        BootstrapOptions options;
        if (!store.is_none()) options.store = py::str(store).cast<std::string>();
        if (!jobId.is_none()) options.jobId = jobId.cast<std::string>();
        options.timeout = toDuration(timeout, Where{-1, "join", -1});
        std::shared_ptr<Context> joined;
        {
          py::gil_scoped_release release;
          joined = join(options);
        }
        return std::make_shared<PyContext>(std::move(joined));
      },
      py::kw_only(), py::arg("store") = py::none(), py::arg("job_id") = py::none(),
      py::arg("timeout") = py::none(),
      "join(*, store=None, job_id=None, timeout=None)\n\nJoins a running job as a newcomer: "
      "its ranks take it in with Context.grow() or reform(), in the place of a rank they "
      "lost, and give it its rank and size. The store and job id as init() finds them "
      "(collx-run --on-failure replace sets COLLX_JOIN=1, which makes init() do this).");
  m.def(
      "config",
      []() {
        py::list out;
        const Config& config = Config::process();
        for (const SettingInfo* setting : settings()) {
          py::dict d;
          d["name"] = setting->name();
          d["component"] = setting->component();
          d["type"] = settingTypeName(setting->type());
          d["range"] = setting->range();
          d["automatic"] = setting->automatic();
          d["default"] = setting->automatic() ? std::string() : setting->defaultText();
          if (setting->automatic()) d["automatic_rule"] = setting->defaultText();
          // The text in effect, as set (an invalid value too: reading it raises), else the
          // default ("" when computed).
          d["value"] = setting->hidden() && setting->isSet(config)
                           ? std::string(SettingInfo::kHiddenText)
                           : config.env(setting->name()).value_or(d["default"].cast<std::string>());
          d["set"] = setting->isSet(config);
          d["source"] = setting->source(config);
          d["help"] = setting->help();
          out.append(d);
        }
        return out;
      },
      "config()\n\nEvery setting (COLLX_* variable) as a dict, as collx-info prints them: name, "
      "component (who reads it), type, range (accepted values), automatic (unset means "
      "computed; automatic_rule says how), default, value (the text in effect), set, source "
      "('environment', 'default' or 'automatic') and help.");
  m.def(
      "build_features",
      []() {
        py::list out;
        for (const BuildFeature& f : buildFeatures())
          out.append(py::make_tuple(f.name, f.built, f.detail));
        return out;
      },
      "build_features()\n\nWhat this build of collx contains: (name, built, detail) tuples.");
  m.def(
      "_pmix_job",
      [](py::handle timeout) -> py::object {
        if (!rendezvous::pmixBuilt() || !rendezvous::pmixServerIn(Config::process())) {
          return py::none();
        }
        const auto deadline = toDuration(timeout, Where{-1, "PMIx", -1})
                                  .value_or(rendezvous::kTimeout.get(Config::process()));
        rendezvous::PmixJob job;
        {
          py::gil_scoped_release release;
          job = rendezvous::pmixJob(deadline);
        }
        return py::make_tuple(job.rank, job.size, job.localRank, job.nspace);
      },
      py::arg("timeout") = py::none(),
      "_pmix_job(timeout=None)\n\nFor collx.torch: (rank, size, local_rank, namespace) from "
      "the PMIx server the environment names (mpirun, srun --mpi=pmix), or None without one.");
  m.def(
      "_pmix_rank0_value",
      [](const std::string& name, const std::string& value, py::handle timeout) {
        rendezvous::StoreOptions options;
        options.timeout = toDuration(timeout, Where{-1, "PMIx", -1});
        py::gil_scoped_release release;
        return rendezvous::pmixRank0Value("python." + name + ".", value, options);
      },
      py::arg("name"), py::arg("value"), py::arg("timeout") = py::none(),
      "_pmix_rank0_value(name, value, timeout=None)\n\nFor collx.torch: rank 0's value for "
      "name, passed to every rank of the PMIx job (each name once per job).");
  m.def(
      "_pmix_disconnect", [] { rendezvous::pmixDisconnect(); },
      "_pmix_disconnect()\n\nFor collx.torch: ends this process's PMIx connection (once every "
      "rank has joined: a task that dies connected makes Slurm end the whole step at once).");
  m.def(
      "_reachable_address", [] { return transport::reachableAddress(Config::process()); },
      "_reachable_address()\n\nFor collx.torch: the address ranks on other hosts dial to "
      "reach a service of this host (COLLX_IFNAME's, else the host name unless it resolves to "
      "loopback, else the first interface's).");
  m.attr("__version__") = versionString();
  m.def("_mapping", &mapping, py::arg("array"), py::arg("op") = py::none(),
        "_mapping(array, op=None)\n\nFor the tests: (collx type, units per element, op applied) "
        "of a call that moves array and, with op, reduces it; raises what such a call would.");
}

}  // namespace collx::python
