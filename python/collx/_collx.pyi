# Type stubs of collx._collx, the compiled module (python/src/*.cc), for editors and type
# checkers: the names, arguments and types; help() on the real module has the words.
# python/tests/test_module.py checks that they cover every public name, method and property
# of the module and its classes, with the arguments the bindings define.
import datetime
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, Literal, overload

from typing_extensions import TypeAlias

from . import Reformed

# What the collectives move: numpy arrays, any C-contiguous object with the buffer protocol
# (bytearray, memoryview, array.array; bytes as an input) and CPU torch tensors. No one type
# names them all without numpy and torch, hence Any.
_Array: TypeAlias = Any
# A ReduceOp, a name ("sum", "max", torch's "PRODUCT"), or torch.distributed.ReduceOp.
_Op: TypeAlias = ReduceOp | str | Any
# A DataType, a name ("bfloat16"), a numpy dtype or a torch dtype.
_DType: TypeAlias = DataType | str | Any
# Seconds, or a timedelta.
_Timeout: TypeAlias = float | datetime.timedelta
# Per-rank element counts or displacements: any iterable of integers (a list, a numpy array).
_Counts: TypeAlias = Iterable[int]

__version__: str

class Error(RuntimeError):
    # The parts of collx's message "rank R: op (peer P): detail" (None on the class itself).
    kind: str | None
    rank: int | None
    peer: int | None
    op: str | None
    detail: str | None

class IoError(Error): ...
class TimeoutError(Error): ...
class InvalidArgument(Error, ValueError): ...
class MismatchError(Error): ...
class Unsupported(Error): ...
class Aborted(Error): ...
class RevokedError(Error): ...
class ExcludedError(Error): ...

class DataType:
    INT8: ClassVar[DataType]
    UINT8: ClassVar[DataType]
    INT32: ClassVar[DataType]
    INT64: ClassVar[DataType]
    FLOAT16: ClassVar[DataType]
    BFLOAT16: ClassVar[DataType]
    FLOAT32: ClassVar[DataType]
    FLOAT64: ClassVar[DataType]
    __members__: ClassVar[dict[str, DataType]]
    def __init__(self, value: int) -> None: ...
    @property
    def name(self) -> str: ...
    @property
    def value(self) -> int: ...
    @property
    def itemsize(self) -> int: ...
    @property
    def type_name(self) -> str: ...
    def __int__(self) -> int: ...
    def __index__(self) -> int: ...
    def __eq__(self, other: object) -> bool: ...
    def __ne__(self, other: object) -> bool: ...
    def __hash__(self) -> int: ...

int8: DataType
uint8: DataType
int32: DataType
int64: DataType
float16: DataType
bfloat16: DataType
float32: DataType
float64: DataType

class ReduceOp:
    SUM: ClassVar[ReduceOp]
    PROD: ClassVar[ReduceOp]
    MIN: ClassVar[ReduceOp]
    MAX: ClassVar[ReduceOp]
    AVG: ClassVar[ReduceOp]
    BAND: ClassVar[ReduceOp]
    BOR: ClassVar[ReduceOp]
    BXOR: ClassVar[ReduceOp]
    @property
    def name(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def commutative(self) -> bool: ...
    @staticmethod
    def custom(fn: Callable[[Any, Any], Any], name: str = "custom",
               commutative: bool = True) -> ReduceOp: ...
    def __eq__(self, other: object) -> bool: ...
    def __hash__(self) -> int: ...

class Work:
    def wait(self, timeout: _Timeout | None = None) -> bool: ...
    def is_completed(self) -> bool: ...
    def result(self) -> Any: ...
    def exception(self) -> Error | None: ...

# collx.init() makes one. Each collective returns its output array (None where it has none:
# reduce and gather off the root, send, barrier), or a Work with async_op=True. uniform=True
# (collectives, blocking): every live rank returns, or every one raises.
class Context:
    @property
    def rank(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def local_rank(self) -> int: ...
    @property
    def job_id(self) -> str: ...
    @property
    def generation(self) -> int: ...
    @property
    def timeout(self) -> float: ...
    @property
    def transports(self) -> list[str]: ...
    @property
    def shared_memory(self) -> bool: ...
    @property
    def peers(self) -> list[dict[str, Any]]: ...
    @property
    def trace_path(self) -> str: ...
    @property
    def closed(self) -> bool: ...
    def flight_record(self) -> list[dict[str, Any]]: ...
    def dump_state(self) -> str: ...
    def stats(self) -> dict[str, Any]: ...
    def describe_peer(self, peer: int) -> str: ...
    def abort(self, why: str = "abort() was called") -> None: ...
    def revoke(self, why: str = "revoke() was called") -> None: ...
    def agree(self, flags: int = ..., *,
              timeout: _Timeout | None = None) -> tuple[int, list[int]]: ...
    def shrink(self, *, timeout: _Timeout | None = None) -> Context: ...
    def grow(self, count: int = ..., *, timeout: _Timeout | None = None) -> Context: ...
    def reform(self, *, timeout: _Timeout | None = None,
               replacement_wait: _Timeout | None = None
               ) -> Reformed: ...
    def split(self, ranks: Iterable[int], name: str, *,
              timeout: _Timeout | None = None) -> Context: ...
    def close(self) -> None: ...
    def __enter__(self) -> Context: ...
    def __exit__(self, *args: object) -> None: ...

    @overload
    def allreduce(self, array: _Array, out: _Array | None = None, op: _Op | None = None, *,
                  dtype: _DType | None = None, algorithm: str | None = None,
                  timeout: _Timeout | None = None, async_op: Literal[True],
                  uniform: bool = False) -> Work: ...
    @overload
    def allreduce(self, array: _Array, out: _Array | None = None, op: _Op | None = None, *,
                  dtype: _DType | None = None, algorithm: str | None = None,
                  timeout: _Timeout | None = None, async_op: bool = False,
                  uniform: bool = False) -> Any: ...
    @overload
    def reduce(self, array: _Array, out: _Array | None = None, root: int = 0,
               op: _Op | None = None, *, dtype: _DType | None = None,
               algorithm: str | None = None, timeout: _Timeout | None = None,
               async_op: Literal[True],
                  uniform: bool = False) -> Work: ...
    @overload
    def reduce(self, array: _Array, out: _Array | None = None, root: int = 0,
               op: _Op | None = None, *, dtype: _DType | None = None,
               algorithm: str | None = None, timeout: _Timeout | None = None,
               async_op: bool = False,
                  uniform: bool = False) -> Any: ...
    @overload
    def broadcast(self, array: _Array, root: int = 0, *, dtype: _DType | None = None,
                  algorithm: str | None = None, timeout: _Timeout | None = None,
                  async_op: Literal[True],
                  uniform: bool = False) -> Work: ...
    @overload
    def broadcast(self, array: _Array, root: int = 0, *, dtype: _DType | None = None,
                  algorithm: str | None = None, timeout: _Timeout | None = None,
                  async_op: bool = False,
                  uniform: bool = False) -> Any: ...
    @overload
    def allgather(self, array: _Array | None, out: _Array | None = None, *,
                  dtype: _DType | None = None, algorithm: str | None = None,
                  timeout: _Timeout | None = None, async_op: Literal[True],
                  uniform: bool = False) -> Work: ...
    @overload
    def allgather(self, array: _Array | None, out: _Array | None = None, *,
                  dtype: _DType | None = None, algorithm: str | None = None,
                  timeout: _Timeout | None = None, async_op: bool = False,
                  uniform: bool = False) -> Any: ...
    @overload
    def allgatherv(self, array: _Array | None, counts: _Counts, out: _Array | None = None,
                   displs: _Counts | None = None, *, dtype: _DType | None = None,
                   algorithm: str | None = None, timeout: _Timeout | None = None,
                   async_op: Literal[True],
                  uniform: bool = False) -> Work: ...
    @overload
    def allgatherv(self, array: _Array | None, counts: _Counts, out: _Array | None = None,
                   displs: _Counts | None = None, *, dtype: _DType | None = None,
                   algorithm: str | None = None, timeout: _Timeout | None = None,
                   async_op: bool = False,
                  uniform: bool = False) -> Any: ...
    @overload
    def reduce_scatter(self, array: _Array, out: _Array | None = None, op: _Op | None = None,
                       *, dtype: _DType | None = None, algorithm: str | None = None,
                       timeout: _Timeout | None = None, async_op: Literal[True],
                  uniform: bool = False) -> Work: ...
    @overload
    def reduce_scatter(self, array: _Array, out: _Array | None = None, op: _Op | None = None,
                       *, dtype: _DType | None = None, algorithm: str | None = None,
                       timeout: _Timeout | None = None, async_op: bool = False,
                  uniform: bool = False) -> Any: ...
    @overload
    def reduce_scatterv(self, array: _Array, counts: _Counts, out: _Array | None = None,
                        op: _Op | None = None, *, dtype: _DType | None = None,
                        algorithm: str | None = None, timeout: _Timeout | None = None,
                        async_op: Literal[True],
                  uniform: bool = False) -> Work: ...
    @overload
    def reduce_scatterv(self, array: _Array, counts: _Counts, out: _Array | None = None,
                        op: _Op | None = None, *, dtype: _DType | None = None,
                        algorithm: str | None = None, timeout: _Timeout | None = None,
                        async_op: bool = False,
                  uniform: bool = False) -> Any: ...
    @overload
    def gather(self, array: _Array, out: _Array | None = None, root: int = 0, *,
               dtype: _DType | None = None, algorithm: str | None = None,
               timeout: _Timeout | None = None, async_op: Literal[True],
                  uniform: bool = False) -> Work: ...
    @overload
    def gather(self, array: _Array, out: _Array | None = None, root: int = 0, *,
               dtype: _DType | None = None, algorithm: str | None = None,
               timeout: _Timeout | None = None, async_op: bool = False,
                  uniform: bool = False) -> Any: ...
    @overload
    def gatherv(self, array: _Array, counts: _Counts, out: _Array | None = None,
                displs: _Counts | None = None, root: int = 0, *, dtype: _DType | None = None,
                algorithm: str | None = None, timeout: _Timeout | None = None,
                async_op: Literal[True],
                  uniform: bool = False) -> Work: ...
    @overload
    def gatherv(self, array: _Array, counts: _Counts, out: _Array | None = None,
                displs: _Counts | None = None, root: int = 0, *, dtype: _DType | None = None,
                algorithm: str | None = None, timeout: _Timeout | None = None,
                async_op: bool = False,
                  uniform: bool = False) -> Any: ...
    @overload
    def scatter(self, array: _Array | None, out: _Array | None = None, root: int = 0, *,
                dtype: _DType | None = None, algorithm: str | None = None,
                timeout: _Timeout | None = None, async_op: Literal[True],
                  uniform: bool = False) -> Work: ...
    @overload
    def scatter(self, array: _Array | None, out: _Array | None = None, root: int = 0, *,
                dtype: _DType | None = None, algorithm: str | None = None,
                timeout: _Timeout | None = None, async_op: bool = False,
                  uniform: bool = False) -> Any: ...
    @overload
    def scatterv(self, array: _Array | None, counts: _Counts, out: _Array,
                 displs: _Counts | None = None, root: int = 0, *, dtype: _DType | None = None,
                 algorithm: str | None = None, timeout: _Timeout | None = None,
                 async_op: Literal[True],
                  uniform: bool = False) -> Work: ...
    @overload
    def scatterv(self, array: _Array | None, counts: _Counts, out: _Array,
                 displs: _Counts | None = None, root: int = 0, *, dtype: _DType | None = None,
                 algorithm: str | None = None, timeout: _Timeout | None = None,
                 async_op: bool = False,
                  uniform: bool = False) -> Any: ...
    @overload
    def alltoall(self, array: _Array, out: _Array | None = None, *,
                 dtype: _DType | None = None, algorithm: str | None = None,
                 timeout: _Timeout | None = None, async_op: Literal[True],
                  uniform: bool = False) -> Work: ...
    @overload
    def alltoall(self, array: _Array, out: _Array | None = None, *,
                 dtype: _DType | None = None, algorithm: str | None = None,
                 timeout: _Timeout | None = None, async_op: bool = False,
                  uniform: bool = False) -> Any: ...
    @overload
    def alltoallv(self, array: _Array, send_counts: _Counts, out: _Array | None,
                  recv_counts: _Counts, send_displs: _Counts | None = None,
                  recv_displs: _Counts | None = None, *, dtype: _DType | None = None,
                  algorithm: str | None = None, timeout: _Timeout | None = None,
                  async_op: Literal[True],
                  uniform: bool = False) -> Work: ...
    @overload
    def alltoallv(self, array: _Array, send_counts: _Counts, out: _Array | None,
                  recv_counts: _Counts, send_displs: _Counts | None = None,
                  recv_displs: _Counts | None = None, *, dtype: _DType | None = None,
                  algorithm: str | None = None, timeout: _Timeout | None = None,
                  async_op: bool = False,
                  uniform: bool = False) -> Any: ...
    @overload
    def barrier(self, *, algorithm: str | None = None, timeout: _Timeout | None = None,
                async_op: Literal[True],
                  uniform: bool = False) -> Work: ...
    @overload
    def barrier(self, *, algorithm: str | None = None, timeout: _Timeout | None = None,
                async_op: bool = False,
                  uniform: bool = False) -> Any: ...
    @overload
    def send(self, array: _Array, peer: int, tag: int = 0, *, dtype: _DType | None = None,
             timeout: _Timeout | None = None, async_op: Literal[True]) -> Work: ...
    @overload
    def send(self, array: _Array, peer: int, tag: int = 0, *, dtype: _DType | None = None,
             timeout: _Timeout | None = None, async_op: bool = False) -> Any: ...
    @overload
    def recv(self, out: _Array, peer: int, tag: int = 0, *, dtype: _DType | None = None,
             timeout: _Timeout | None = None, async_op: Literal[True]) -> Work: ...
    @overload
    def recv(self, out: _Array, peer: int, tag: int = 0, *, dtype: _DType | None = None,
             timeout: _Timeout | None = None, async_op: bool = False) -> Any: ...

def init(*, rank: int | None = None, size: int | None = None, store: str | None = None,
         local_rank: int | None = None, job_id: str | None = None,
         generation: int | None = None, timeout: _Timeout | None = None) -> Context: ...
def join(*, store: str | None = None, job_id: str | None = None,
         timeout: _Timeout | None = None) -> Context: ...
def config() -> list[dict[str, Any]]: ...
def build_features() -> list[tuple[str, bool, str]]: ...

# For collx.torch and the tests.
def _pmix_job(timeout: _Timeout | None = None) -> tuple[int, int, int, str] | None: ...
def _pmix_rank0_value(name: str, value: str, timeout: _Timeout | None = None) -> str: ...
def _pmix_disconnect() -> None: ...
def _reachable_address() -> str: ...
def _mapping(array: _Array, op: _Op | None = None) -> tuple[str, int, str | None]: ...
