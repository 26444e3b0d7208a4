"""The torch.distributed backend "collx".

    import torch.distributed as dist
    import collx.torch  # registers the backend

    dist.init_process_group("collx", init_method="env://")   # or tcp://host:port, file:///path
    dist.all_reduce(tensor)

collx joins through the store torch's rendezvous made (TCPStore, FileStore), so every
init_method torch accepts works; ``timeout`` bounds joining and every call. Under mpirun or
``srun --mpi=pmix``, ``dist.init_process_group("collx")`` needs nothing set: where torch's
variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) are absent, env:// takes rank and size
from the launcher's PMIx server, and rank 0 hosts torch's TCPStore, whose address PMIx passes
to the others. Supported on CPU
tensors: all_reduce, all_gather, all_gather_into_tensor, reduce_scatter,
reduce_scatter_tensor, broadcast, reduce, gather, scatter, all_to_all, all_to_all_single,
barrier, send, recv (irecv/isend), with work handles torch can wait on (and futures, which
DistributedDataParallel uses). Errors are collx's exception classes (collx.IoError, ...),
which are RuntimeErrors. The COLLX_* environment variables (COLLX_ALLREDUCE_ALGO,
COLLX_IFNAME, ...) apply as for collx.init().
"""

import importlib.abc
import importlib.util
import datetime as _dt
import inspect
import itertools
import os
import socket
import sys
import urllib.parse
import warnings
import weakref

import torch  # noqa: F401  (torch's c10d types must exist before the extension loads)
import torch.distributed as _dist

from . import _collx  # noqa: F401  (collx's exception classes and their translation)
from . import _collx_torch
from ._collx_torch import ProcessGroupCollx, _all_reduce_at, _raise_last

__all__ = ["ProcessGroupCollx", "BACKEND", "GroupOptions", "abort", "all_reduce", "backend_of",
           "create_process_group", "dump_state", "monitored_barrier", "reform"]

BACKEND = "collx"


def create_process_group(store, rank, world_size, timeout):
    """The backend's creator, as torch.distributed calls it: joins through ``store`` (a c10d
    Store) as ``rank`` of ``world_size``; ``timeout`` (a timedelta) bounds joining and every
    call. Returns a ProcessGroupCollx."""
    return ProcessGroupCollx(store, rank, world_size, timeout)


def backend_of(group=None):
    """The ProcessGroupCollx of ``group`` (default: the default group): torch 2.x keeps it
    behind its ProcessGroup (for "cpu"; under TORCH_DISTRIBUTED_DEBUG=DETAIL inside torch's
    wrapper), torch 1.13's group is the backend itself. A group whose CPU backend is not
    collx's is a ValueError naming it."""
    if group is None:
        group = _dist.distributed_c10d._get_default_group()
    if isinstance(group, ProcessGroupCollx):
        return group
    try:
        backend = group._get_backend(torch.device("cpu"))
    except (AttributeError, RuntimeError) as e:  # torch 1.13's other groups; no cpu backend
        raise ValueError("the group's backend is %s, not collx (%s)"
                         % (_dist.get_backend(group), e)) from None
    backend = getattr(backend, "wrapped_pg", backend)
    if not isinstance(backend, ProcessGroupCollx):
        raise ValueError("the group's backend for cpu is %s, not collx" % type(backend).__name__)
    return backend


def dump_state(group=None):
    """A hang report now (collx.Context.dump_state) for ``group``'s collx backend (default:
    the default group): every rank's calls, summarized through the store, joined into one
    diagnosis. Returns its text."""
    return backend_of(group).dump_state()


def abort(group=None, why="collx.torch.abort() was called"):
    """Ends every call of ``group`` (default: the default group) on this rank at once: each
    blocked call, and every later one, raises collx.Aborted carrying ``why``. Thread-safe: a
    framework's watchdog thread calls it while the training thread is blocked in a
    collective (torch's own abort_process_group is NCCL's only). The other ranks' calls fail
    as their peer's connection ends or at their deadline; destroy the group after."""
    backend_of(group).abort(why)


def reform(group=None, timeout=None, replacement_wait=30.0):
    """After a failure, on every live rank: ``group``'s collx context (default: the default
    group's) re-forms with a newcomer in each failed rank's place (``collx-run --on-failure
    replace`` starts one; its ``init_process_group("collx")`` joins), and the group goes on
    in place, with the same ranks and size: DDP and the other users of the group carry on.
    So do the sub-groups split from it (new_group's, DeviceMesh's): each is split again, in
    the order they were made, as the newcomer's script makes them again.
    ``timeout`` and ``replacement_wait`` in seconds (or timedeltas; default 30 minutes, and
    30 s for the newcomers). Returns (failed, joined). Raises
    collx.InvalidArgument where a failed rank found no newcomer."""
    pg = backend_of(group)
    limit = timeout if timeout is not None else _dt.timedelta(minutes=30)
    if not isinstance(limit, _dt.timedelta):
        limit = _dt.timedelta(seconds=limit)
    wait = replacement_wait
    if not isinstance(wait, _dt.timedelta):
        wait = _dt.timedelta(seconds=wait)
    return pg.reform(limit, wait)


def monitored_barrier(group=None, timeout=None, wait_all_ranks=False):
    """torch.distributed.monitored_barrier, for collx's groups too (torch's refuses every
    backend but gloo): a barrier that raises, naming the ranks that did not arrive within
    ``timeout``, instead of waiting for them. Other backends' groups go to torch's."""
    if group is None:
        group = _dist.distributed_c10d._get_default_group()
    try:
        backend_of(group)
    except ValueError:  # another backend's group, or one this rank is not in: torch's
        return _torch_monitored_barrier(group=group, timeout=timeout,
                                        wait_all_ranks=wait_all_ranks)
    if timeout is None:
        timeout = _dist.default_pg_timeout
    return group.monitored_barrier(timeout, wait_all_ranks=wait_all_ranks)


# ---- the small-call path ---------------------------------------------------------------
# collx.torch.all_reduce is a C function (_collx_torch.all_reduce, its docstring there): the
# Python wrapper it replaced, _all_reduce_py below, cost ~280 ns per call more. The C function
# goes back to Python for what is rare: an op it has not seen (_op_value), a group not in its
# cache (backend_of), a call being compiled or exported (_all_reduce_compiling), an error
# (_raise_last). Under torch.compile, Dynamo cannot look inside a C function: it traces
# _all_reduce_py in its place (_trace_through, below).
_fast = [None, 0, None]  # _all_reduce_py's cache: a weak reference to the group last used,
                         # its backend's address and the backend (held)
# torch's RedOpType values by functional collectives' names for them.
_OP_VALUES = {"sum": 0, "avg": 1, "product": 2, "min": 3, "max": 4, "band": 5, "bor": 6,
              "bxor": 7}
_BY_OP = [(getattr(_dist.ReduceOp, name.upper()), value) for name, value in _OP_VALUES.items()]
_last_op = [None, 0]  # the dist.ReduceOp last given to _all_reduce_py, and its value
# The default group, read straight from where torch keeps it (torch 2.x: _world, whose
# GroupMember.WORLD is a property on a metaclass; torch 1.13: a class attribute).
_WORLD = getattr(_dist.distributed_c10d, "_world", None)
if _WORLD is not None and hasattr(_WORLD, "_default_pg"):
    _DEFAULT_GROUP_AT = (_WORLD, "_default_pg")
else:
    _DEFAULT_GROUP_AT = (_dist.GroupMember, "WORLD")


def _default_group():
    return getattr(*_DEFAULT_GROUP_AT)


def _all_reduce_py(tensor, op="sum", group=None):
    """collx.torch.all_reduce in Python: what torch.compile traces in its place (and the
    benchmarks' comparison with the C function)."""
    # Every line here is paid on every call: no hashing of torch's op objects (a third of a
    # microsecond each in torch 2.x), no torch.distributed lookups once the group is known.
    if isinstance(op, str):
        value = _OP_VALUES.get(op)
        if value is None:
            raise ValueError("op %r is none of %s" % (op, sorted(_OP_VALUES)))
    elif op is _last_op[0]:
        value = _last_op[1]
    else:
        value = _op_value(op)
        _last_op[:] = [op, value]
    if group is None:
        group = _default_group()
    if _compiling():
        _all_reduce_op(tensor, value, group.group_name)
        return tensor
    group_ref, address, _ = _fast
    if group_ref is None or group_ref() is not group:
        backend = backend_of(group)
        # The backend held while the group lives (torch 2.x makes a new Python object for
        # it at each lookup; torch 1.13's is the group, which holding would keep alive), let
        # go with the group: destroy_process_group frees it. The call goes to its address,
        # without pybind11's dispatch.
        address = backend._address()
        _fast[:] = [weakref.ref(group, _forget), address, None if backend is group else backend]
    if _all_reduce_at(address, tensor, value) is not None:
        _raise_last()
    return tensor


def _forget(group_ref):
    if _fast[0] is group_ref:
        _fast[:] = [None, 0, None]


def _op_value(op):
    """torch's RedOpType value of a dist.ReduceOp (PREMUL_SUM's: the backend refuses it,
    naming it)."""
    for known, value in _BY_OP:
        if op == known:
            return value
    try:
        return int(op)
    except TypeError:
        raise TypeError("op must be a torch.distributed.ReduceOp or one of %s, not %r"
                        % (sorted(_OP_VALUES), op)) from None


_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)


def _all_reduce_compiling(tensor, op, group):
    """The C function's path while torch.compiler.is_compiling() (an export, or a trace
    outside Dynamo): the custom op, which the graph captures."""
    _all_reduce_op(tensor, op, group.group_name)
    return tensor


def _define_all_reduce_op():
    @torch.library.custom_op("collx::all_reduce_", mutates_args=("tensor",))
    def op(tensor: torch.Tensor, op: int, group_name: str) -> None:
        group = _dist.distributed_c10d._resolve_process_group(group_name)
        backend_of(group).all_reduce_(tensor, op)

    @op.register_fake
    def _(tensor, op, group_name):
        return None
    return op


if hasattr(torch, "library") and hasattr(torch.library, "custom_op"):
    try:
        _all_reduce_op = _define_all_reduce_op()
    except RuntimeError:  # defined by an earlier load of this module
        _all_reduce_op = torch.ops.collx.all_reduce_
else:  # torch 1.13: no torch.compile to capture it
    def _all_reduce_op(tensor, op, group_name):
        raise RuntimeError("torch %s has no torch.library.custom_op" % torch.__version__)




def _compiling_check():
    """What the C function asks whether a call is being compiled or exported:
    torch.compiler.is_compiling (None where there is none), or where that function only
    returns torch.compiler._is_compiling_flag (torch 2.6; its torch.jit.is_scripting() is
    false outside TorchScript, which cannot call a C function), the flag's place, (module,
    name), read as an attribute: 50 ns less a call."""
    compiler = getattr(torch, "compiler", None)
    is_compiling = getattr(compiler, "is_compiling", None)
    code = getattr(is_compiling, "__code__", None)
    if (code is not None and hasattr(compiler, "_is_compiling_flag")
            and code.co_names == ("torch", "jit", "is_scripting", "_is_compiling_flag")):
        return (compiler, "_is_compiling_flag")
    return is_compiling


_collx_torch._fast_setup(_op_value, backend_of, _all_reduce_compiling, _compiling_check(),
                         *_DEFAULT_GROUP_AT, _raise_last)


def _trace_through():
    """Has Dynamo trace _all_reduce_py where a compiled function calls the C function
    (torch.compiler.substitute_in_graph), once torch._dynamo is loaded: now if it is, else
    when it loads (importing it costs a second, which a process that never compiles should
    not pay)."""
    def register():
        try:
            torch.compiler.substitute_in_graph(all_reduce)(_all_reduce_py)
        except ValueError:  # registered by an earlier load of this module
            pass

    if "torch._dynamo" in sys.modules:
        register()
        return

    class _OnDynamoImport(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name != "torch._dynamo":
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            if spec is None or not hasattr(spec.loader, "exec_module"):
                return spec
            exec_module = spec.loader.exec_module

            def exec_then_register(module):
                exec_module(module)
                try:
                    register()
                except Exception as e:  # torch.compile still works, with a graph break
                    warnings.warn("collx.torch.all_reduce: torch.compile will not capture "
                                  "it (%s: %s)" % (type(e).__name__, e))
            spec.loader.exec_module = exec_then_register
            return spec

    sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != "_OnDynamoImport"]
    sys.meta_path.insert(0, _OnDynamoImport())


# torch 2.4 has the custom op but no substitute_in_graph: there the Python function is the
# entry, which Dynamo traces itself.
if hasattr(getattr(torch, "compiler", None), "substitute_in_graph"):
    all_reduce = _collx_torch.all_reduce
    _trace_through()
elif hasattr(torch, "library") and hasattr(torch.library, "custom_op"):
    all_reduce = _all_reduce_py
    all_reduce.__doc__ = _collx_torch.all_reduce.__doc__  # (without its signature line)
else:  # torch 1.13: nothing to compile
    all_reduce = _collx_torch.all_reduce


# torch.distributed re-exports distributed_c10d's functions: both names get collx's, once
# however often this module loads.
_torch_monitored_barrier = getattr(_dist.monitored_barrier, "torch_function",
                                   _dist.monitored_barrier)
monitored_barrier.torch_function = _torch_monitored_barrier
_dist.monitored_barrier = monitored_barrier
_dist.distributed_c10d.monitored_barrier = monitored_barrier


def _default_backend():
    """The default group's ProcessGroupCollx, or None (no default group yet, or not collx's)."""
    try:
        return backend_of(_dist.distributed_c10d._get_default_group())
    except (RuntimeError, ValueError):
        return None


class GroupOptions:
    """``pg_options`` for ``dist.new_group(..., backend="collx", pg_options=...)``.

    ``split=True``: the group is a split of the default group's context (Context::split), over
    its connections and shared memory, with no rendezvous: cheaper to make, no descriptor of
    its own, within a host a shared-memory group of its own in a slot of the default group's
    shared memory (``ProcessGroupCollx.shared_memory``; 8 live sub-groups per rank at most,
    beyond which its calls take the point-to-point algorithms), and an error or abort on it
    ends the default group too.
    ``split=False``: it joins through the store and connects on its own: a fault domain of its
    own.
    ``split=None`` (the default, as with no options): COLLX_TORCH_SPLIT, or where that is
    unset, a split, unless its ranks are all on one host and the split found no free slot for
    their shared-memory group: then a context of its own (the shared-memory algorithms are
    2-5x faster per call than the point-to-point ones)."""

    def __init__(self, split=None):
        self.split = None if split is None else bool(split)

    def __repr__(self):
        return "collx.torch.GroupOptions(split=%r)" % self.split


def _create_group(options, backend_options=None):
    """The creator torch calls with its extended arguments (register_backend's extended_api).
    A sub-group of a collx default group may be a split of its context (Context::split: the
    default group's connections, no rendezvous); GroupOptions, else COLLX_TORCH_SPLIT, else
    the rule say whether (see GroupOptions). The default group, a group that is not split and
    a group of another default backend's job join through torch's store."""
    ranks = list(options.global_ranks_in_group)
    split = _collx_torch._split_groups()
    if isinstance(backend_options, GroupOptions) and backend_options.split is not None:
        split = backend_options.split
    parent = _default_backend() if ranks and split is not False else None
    if parent is not None:
        me = _dist.get_rank()
        # torch numbers a group's ranks by their place in this list: so does the split.
        if me in ranks and ranks.index(me) == options.group_rank:
            group = parent.split(ranks, "torch/%s" % options.group_id, options.timeout)
            # The rule: a group within one host (every member's connection from here is
            # shared memory; each member sees the same) whose split got no shared-memory
            # group (every member learns the same) gets a context of its own, which has one.
            transports = parent.transports
            one_host = all(transports[r] in ("shm", "self") for r in ranks) and len(ranks) > 1
            if split or not one_host or group.shared_memory:
                return group
            del group
    group = ProcessGroupCollx(options.store, options.group_rank, options.group_size,
                              options.timeout)
    if group.joined and not ranks and not _TORCH_2:
        _through_the_formed_jobs_barrier(options.store)
    return group


# torch 2.x's register_backend takes the devices a backend serves; torch 1.13's does not.
_TORCH_2 = "devices" in inspect.signature(_dist.Backend.register_backend).parameters


def _through_the_formed_jobs_barrier(store):
    """A newcomer's default group on torch 1.13, whose init_process_group ends in a store
    barrier (distributed_c10d._store_based_barrier): each rank adds 1 to a key under the
    "default_pg" prefix and waits until it equals the world size exactly. The job's ranks
    counted it up when they formed, so the newcomer's 1 alone would make it one more for ever:
    it takes one off first (a second newcomer meanwhile takes another, and each waits until
    both added theirs back). The creator's store is PrefixStore(group name, that store)."""
    under = getattr(store, "underlying_store", None)
    if under is None:
        raise RuntimeError("collx.torch: torch %s gave the backend a store without its "
                           "underlying store: a newcomer cannot pass init_process_group's "
                           "barrier" % torch.__version__)
    c10d = _dist.distributed_c10d
    under.add("%s:%d" % (c10d.STORE_BASED_BARRIER_PREFIX, c10d._group_count), -1)
    # Every new_group of the job ends in the same barrier (on every rank, members or not),
    # each with the next number: the newcomer's script makes them again in the same order,
    # so it takes one off each count the job's ranks made (a key counted to 0 by no one was
    # never made: the groups after it are new to every rank).
    for number in itertools.count(c10d._group_count + 1):
        key = "%s:%d" % (c10d.STORE_BASED_BARRIER_PREFIX, number)
        if under.add(key, 0) <= 0:
            break
        under.add(key, -1)


def _register():
    if BACKEND.upper() in getattr(_dist.Backend, "_plugins", {}):
        return
    # torch 2.x puts backends behind its ProcessGroup per device type: collx serves "cpu"
    # (torch 1.13's register_backend has no devices, and the group is the backend).
    if _TORCH_2:
        _dist.Backend.register_backend(BACKEND, _create_group, extended_api=True,
                                       devices=["cpu"])
    else:
        _dist.Backend.register_backend(BACKEND, _create_group, extended_api=True)


_register()


# ---- env:// under a PMIx launcher ---------------------------------------------------------
_TORCH_VARIABLES = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
_rendezvous_module = sys.modules["torch.distributed.rendezvous"]
_meetings = itertools.count()


def _pmix_rendezvous(job, timeout):
    rank, size, _local_rank, _namespace = job
    name = "torch-store-%d" % next(_meetings)  # every rank's n-th meets the others' n-th
    if rank == 0:
        try:
            # Listens on every interface; the others dial this address, and collx routes
            # its own connections by it (so not "0.0.0.0", which routes to loopback).
            host = _collx._reachable_address()
            store = _tcp_store(host, 0, size, True, timeout, wait_for_workers=False)
            address = "%s %d" % (host, store.port)
        except Exception as e:  # tell the others at once instead of leaving them waiting
            _collx._pmix_rank0_value(name, "error rank 0 could not start torch's TCPStore: %s"
                                     % e, timeout)
            raise
        _collx._pmix_rank0_value(name, address, timeout)
    else:
        address = _collx._pmix_rank0_value(name, "", timeout)
        if address.startswith("error "):
            raise RuntimeError("rank %d: %s" % (rank, address[len("error "):]))
        host, port = address.split()
        store = _tcp_store(host, int(port), size, False, timeout)
    # Once every rank has joined the store, PMIx is done with: a task that dies while
    # connected makes Slurm's PMIx plugin end the whole step before the others can report.
    key = "collx/%s/joined" % name
    if store.add(key, 1) == size:
        store.set(key + "/all", "1")
    store.wait([key + "/all"])
    _collx._pmix_disconnect()
    yield store, rank, size
    raise RuntimeError("Unable to perform re-rendezvous using env:// method")


def _lacks_libuv(error):
    """torch 2.x's refusal of a TCPStore with libuv in a torch built without it (Debian 13's
    torch 2.6), where libuv is the default."""
    return isinstance(error, RuntimeError) and "without libuv" in str(error)


def _tcp_store(*args, **kwargs):
    """torch's TCPStore, without libuv where this torch has none."""
    try:
        return _dist.TCPStore(*args, **kwargs)
    except RuntimeError as e:
        if not _lacks_libuv(e) or os.environ.get("USE_LIBUV") == "1":
            raise
        return _dist.TCPStore(*args, use_libuv=False, **kwargs)


def _without_libuv(url):
    parts = urllib.parse.urlparse(url)
    return urllib.parse.urlunparse(parts._replace(
        query=parts.query + ("&" if parts.query else "") + "use_libuv=0"))


def _libuv_fallback(handler, url, timeout, kwargs):
    """torch's handler; where its TCPStore refuses libuv because this torch has none, and
    neither the URL's use_libuv nor USE_LIBUV asked for it, once more with use_libuv=0 (the
    rendezvous an unchanged script would otherwise fail at, with any backend)."""
    it = handler(url, timeout=timeout, **kwargs)
    try:
        first = next(it)
    except RuntimeError as e:
        if not _lacks_libuv(e) or "use_libuv" in url or "USE_LIBUV" in os.environ:
            raise
        it = handler(_without_libuv(url), timeout=timeout, **kwargs)
        first = next(it)
    yield first
    yield from it


def _env_or_pmix(torch_handler):
    def handler(url, timeout=_dist.default_pg_timeout, **kwargs):
        """torch's env:// handler; where none of torch's variables is set (nor rank and
        world_size given) and the environment names a PMIx server, rank and size from
        PMIx."""
        query = urllib.parse.parse_qs(urllib.parse.urlparse(url).query)
        given = "rank" in query or "world_size" in query
        given = given or any(v in os.environ for v in _TORCH_VARIABLES)
        job = None if given else _collx._pmix_job(timeout)
        if job is None:
            return _libuv_fallback(torch_handler, url, timeout, kwargs)
        return _pmix_rendezvous(job, timeout)
    return handler


def _tcp(torch_handler):
    def handler(url, timeout=_dist.default_pg_timeout, **kwargs):
        """torch's tcp:// handler, without libuv where this torch has none."""
        return _libuv_fallback(torch_handler, url, timeout, kwargs)
    return handler


# torch keeps its handlers in this table; register_rendezvous_handler refuses to replace one,
# so the entries are wrapped in place, once however often this module loads (a reload finds
# the wrapper of the previous load and keeps its torch handler).
for _scheme, _make in (("env", _env_or_pmix), ("tcp", _tcp)):
    _installed = _rendezvous_module._rendezvous_handlers.get(_scheme)
    if _installed is not None:
        _torch_handler = getattr(_installed, "torch_handler", _installed)
        _rendezvous_module._rendezvous_handlers[_scheme] = _make(_torch_handler)
        _rendezvous_module._rendezvous_handlers[_scheme].torch_handler = _torch_handler
