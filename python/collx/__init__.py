"""collx: collective communication for CPU processes.

    import numpy as np
    import collx

    ctx = collx.init()                  # rank, size and store from the environment (collx-run)
    x = np.full(1024, ctx.rank, dtype=np.float32)
    ctx.allreduce(x)                    # in place: every rank now holds the sum
    w = ctx.allgather(x, async_op=True) # a Work
    everyone = w.result()               # shape (ctx.size, 1024)

Every collective is a method of Context and takes numpy arrays, any C-contiguous object with
the buffer protocol, or CPU torch tensors (bfloat16 included). Errors are collx.Error
subclasses: IoError, TimeoutError, InvalidArgument, MismatchError, Unsupported, Aborted,
RevokedError, ExcludedError.
``import collx.torch`` registers the torch.distributed backend "collx".
"""

import atexit as _atexit
import weakref as _weakref

from ._collx import (  # noqa: F401
    Aborted,
    Context,
    DataType,
    Error,
    ExcludedError,
    InvalidArgument,
    IoError,
    MismatchError,
    ReduceOp,
    RevokedError,
    TimeoutError,
    Unsupported,
    Work,
    __version__,
    bfloat16,
    build_features,
    config,
    float16,
    float32,
    float64,
    int8,
    int32,
    int64,
    uint8,
)
from ._collx import init as _init
from ._collx import join as _join

__all__ = [
    "Aborted", "Context", "DataType", "Error", "ExcludedError", "InvalidArgument", "IoError",
    "MismatchError", "ReduceOp", "Reformed", "RevokedError", "TimeoutError", "Unsupported",
    "Work", "bfloat16", "build_features", "config", "float16", "float32", "float64", "init",
    "int8", "int32", "int64", "join", "uint8",
]

# Contexts still open at exit are closed before the interpreter tears down (closing may wait
# for async calls and, on a rank that hosts the store, for the other ranks to leave).
_open_contexts = _weakref.WeakSet()


def init(*, rank=None, size=None, store=None, local_rank=None, job_id=None, generation=None,
         timeout=None):
    """Joins a job and connects to every peer; returns a collx.Context.

    Each value not given is taken from the environment: COLLX_RANK, COLLX_WORLD_SIZE and
    COLLX_STORE (collx-run sets them), else torchrun's RANK, WORLD_SIZE, MASTER_ADDR and
    MASTER_PORT (rank 0 then hosts the store), Open MPI's or Slurm's variables; with nothing
    set, the process is rank 0 of 1. ``store`` is a URL (tcp://host:port, file:///shared/dir,
    redis://host:port); ``timeout`` is in seconds or a timedelta (else COLLX_TIMEOUT) and
    bounds joining and, later, every call. The GIL is released while joining.

    Raises collx.InvalidArgument for a missing or malformed value, collx.TimeoutError when
    ranks do not all join in time, collx.MismatchError when two processes claim one rank.
    """
    ctx = _init(rank=rank, size=size, store=store, local_rank=local_rank, job_id=job_id,
                generation=generation, timeout=timeout)
    _open_contexts.add(ctx)
    return ctx


def join(*, store=None, job_id=None, timeout=None):
    """Joins a running job as a newcomer; returns a collx.Context.

    The job's ranks take it in with Context.grow() or Context.reform(), in the place of a
    rank they lost, and give it its rank and size. The store and job id are found as init()
    finds them (collx-run --on-failure replace sets COLLX_JOIN=1 for the processes it starts
    in a failed rank's place, which makes init() join so). Raises collx.TimeoutError when no
    rank takes it in time.
    """
    ctx = _join(store=store, job_id=job_id, timeout=timeout)
    _open_contexts.add(ctx)
    return ctx


class Reformed(tuple):
    """What Context.reform() returns: a tuple (context, failed, joined, rank_of), which
    unpacks so, with these as attributes too, and ``causes``: per failed rank, ``(cause,
    why)`` as this rank saw it, the cause one of "killed" (its process ended, or it closed its
    context), "stopped" (silent for COLLX_PEER_TIMEOUT on this host, its process still there),
    "unreachable" (silent from another host: stopped, its host down or the network cut),
    "excluded" (it did not come to the agreement in time) or "unknown"."""

    def __new__(cls, context, failed, joined, rank_of, causes):
        self = super().__new__(cls, (context, failed, joined, rank_of))
        self.causes = causes
        return self

    context = property(lambda self: self[0], doc="the new context")
    failed = property(lambda self: self[1], doc="the old context's ranks that failed")
    joined = property(lambda self: self[2], doc="the new context's ranks that newcomers took")
    rank_of = property(lambda self: self[3], doc="per old rank, its new rank (-1: failed)")


@_atexit.register
def _close_open_contexts():
    for ctx in list(_open_contexts):
        try:
            ctx.close()
        except Exception:  # noqa: BLE001 - nothing left to report it to
            pass
