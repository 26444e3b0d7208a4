# Type stubs of the package collx (__init__.py): what it re-exports from the compiled module
# (its stubs: _collx.pyi) and init(). python/tests/test_module.py checks that every name of
# collx.__all__ is here and that init() takes the same arguments.
from ._collx import Aborted as Aborted
from ._collx import Context as Context
from ._collx import DataType as DataType
from ._collx import Error as Error
from ._collx import ExcludedError as ExcludedError
from ._collx import InvalidArgument as InvalidArgument
from ._collx import IoError as IoError
from ._collx import MismatchError as MismatchError
from ._collx import ReduceOp as ReduceOp
from ._collx import RevokedError as RevokedError
from ._collx import TimeoutError as TimeoutError
from ._collx import Unsupported as Unsupported
from ._collx import Work as Work
from ._collx import __version__ as __version__
from ._collx import _Timeout
from ._collx import bfloat16 as bfloat16
from ._collx import build_features as build_features
from ._collx import config as config
from ._collx import float16 as float16
from ._collx import float32 as float32
from ._collx import float64 as float64
from ._collx import int8 as int8
from ._collx import int32 as int32
from ._collx import int64 as int64
from ._collx import uint8 as uint8

__all__ = [
    "Aborted", "Context", "DataType", "Error", "ExcludedError", "InvalidArgument", "IoError",
    "MismatchError", "ReduceOp", "Reformed", "RevokedError", "TimeoutError", "Unsupported",
    "Work", "bfloat16", "build_features", "config", "float16", "float32", "float64", "init",
    "int8", "int32", "int64", "uint8",
]

# What Context.reform() returns: unpacks as (context, failed, joined, rank_of); causes: per
# failed rank, (cause, why) as this rank saw it ("killed", "stopped", "unreachable",
# "excluded" or "unknown").
class Reformed(tuple[Context, list[int], list[int], list[int]]):
    causes: dict[int, tuple[str, str]]
    def __new__(cls, context: Context, failed: list[int], joined: list[int],
                rank_of: list[int], causes: dict[int, tuple[str, str]]) -> Reformed: ...
    @property
    def context(self) -> Context: ...
    @property
    def failed(self) -> list[int]: ...
    @property
    def joined(self) -> list[int]: ...
    @property
    def rank_of(self) -> list[int]: ...

def init(*, rank: int | None = None, size: int | None = None, store: str | None = None,
         local_rank: int | None = None, job_id: str | None = None,
         generation: int | None = None, timeout: _Timeout | None = None) -> Context: ...
def join(*, store: str | None = None, job_id: str | None = None,
         timeout: _Timeout | None = None) -> Context: ...
