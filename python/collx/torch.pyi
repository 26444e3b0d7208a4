# Type stubs of collx.torch (torch.py) and its ProcessGroupCollx (python/src/torch_backend.cc).
# python/tests/test_module.py checks that they cover collx.torch.__all__, with the same
# arguments, and the methods and properties ProcessGroupCollx defines.
from collections.abc import Iterable
from datetime import timedelta

from torch import Tensor
from torch.distributed import ProcessGroup, ReduceOp, Store

__all__ = ["ProcessGroupCollx", "BACKEND", "GroupOptions", "abort", "all_reduce", "backend_of",
           "create_process_group", "dump_state", "monitored_barrier"]

BACKEND: str

# At run time a subclass of torch's c10d Backend (torch 2.x) or ProcessGroup (torch 1.13),
# whose Python names are private and differ between the two: only its own members here.
class ProcessGroupCollx:
    def __init__(self, store: Store, rank: int, size: int,
                 timeout: timedelta = ...) -> None: ...  # 30 minutes
    @property
    def transports(self) -> list[str]: ...
    @property
    def shared_memory(self) -> bool: ...
    def abort(self, why: str = "the group was aborted (ProcessGroupCollx.abort)") -> None: ...
    def dump_state(self) -> str: ...
    def reform(self, timeout: timedelta,
               replacement_wait: timedelta = ...) -> tuple[list[int], list[int]]: ...
    def split(self, ranks: Iterable[int], name: str,
              timeout: timedelta = ...) -> ProcessGroupCollx: ...  # 30 minutes
    def all_reduce_(self, tensor: Tensor, op: int = 0) -> None: ...  # torch's RedOpType value
    def _time_own_all_reduce(self, tensor: Tensor, iterations: int) -> list[float]: ...
    def _address(self) -> int: ...

class GroupOptions:
    split: bool | None
    def __init__(self, split: bool | None = None) -> None: ...

def create_process_group(store: Store, rank: int, world_size: int,
                         timeout: timedelta) -> ProcessGroupCollx: ...
def all_reduce(tensor: Tensor, op: ReduceOp | str = "sum",
               group: ProcessGroup | None = None) -> Tensor: ...
def backend_of(group: ProcessGroup | ProcessGroupCollx | None = None) -> ProcessGroupCollx: ...
def dump_state(group: ProcessGroup | ProcessGroupCollx | None = None) -> str: ...
def abort(group: ProcessGroup | ProcessGroupCollx | None = None,
          why: str = "collx.torch.abort() was called") -> None: ...
def reform(group: ProcessGroup | ProcessGroupCollx | None = None,
           timeout: timedelta | float | None = None,
           replacement_wait: timedelta | float = ...) -> tuple[list[int], list[int]]: ...
def monitored_barrier(group: ProcessGroup | None = None, timeout: timedelta | None = None,
                      wait_all_ranks: bool = False) -> None: ...
