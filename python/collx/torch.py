"""The torch.distributed backend "collx".

    import torch.distributed as dist
    import collx.torch  # registers the backend

    dist.init_process_group("collx", init_method="env://")   # or tcp://host:port, file:///path
    dist.all_reduce(tensor)

collx joins through the store torch's rendezvous made (TCPStore, FileStore), so every
init_method torch accepts works; ``timeout`` bounds joining and every call. Supported on CPU
tensors: all_reduce, all_gather, all_gather_into_tensor, reduce_scatter,
reduce_scatter_tensor, broadcast, reduce, gather, scatter, all_to_all, all_to_all_single,
barrier, send, recv (irecv/isend), with work handles torch can wait on (and futures, which
DistributedDataParallel uses). Errors are collx's exception classes (collx.IoError, ...),
which are RuntimeErrors. The COLLX_* environment variables (COLLX_ALLREDUCE_ALGO,
COLLX_IFNAME, ...) apply as for collx.init().
"""

import torch  # noqa: F401  (torch's c10d types must exist before the extension loads)
import torch.distributed as _dist

from . import _collx  # noqa: F401  (collx's exception classes and their translation)
from ._collx_torch import ProcessGroupCollx

__all__ = ["ProcessGroupCollx", "BACKEND", "create_process_group", "dump_state"]

BACKEND = "collx"


def create_process_group(store, rank, world_size, timeout):
    """The backend's creator, as torch.distributed calls it: joins through ``store`` (a c10d
    Store) as ``rank`` of ``world_size``; ``timeout`` (a timedelta) bounds joining and every
    call. Returns a ProcessGroupCollx."""
    return ProcessGroupCollx(store, rank, world_size, timeout)


def dump_state(group=None):
    """A hang report now (collx.Context.dump_state) for ``group``'s collx backend (default:
    the default group): every rank's calls, summarized through the store, joined into one
    diagnosis. Returns its text."""
    if group is None:
        group = _dist.distributed_c10d._get_default_group()
    if isinstance(group, ProcessGroupCollx):
        return group.dump_state()
    return group._get_backend(torch.device("cpu")).dump_state()


if BACKEND.upper() not in getattr(_dist.Backend, "_plugins", {}):
    _dist.Backend.register_backend(BACKEND, create_process_group)
