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

__all__ = ["ProcessGroupCollx", "BACKEND", "create_process_group"]

BACKEND = "collx"


def create_process_group(store, rank, world_size, timeout):
    """The backend's creator, as torch.distributed calls it: joins through ``store`` (a c10d
    Store) as ``rank`` of ``world_size``; ``timeout`` (a timedelta) bounds joining and every
    call. Returns a ProcessGroupCollx."""
    return ProcessGroupCollx(store, rank, world_size, timeout)


if BACKEND.upper() not in getattr(_dist.Backend, "_plugins", {}):
    _dist.Backend.register_backend(BACKEND, create_process_group)
