"""The matrix of test_collectives: every collective x every element type, each case checking
every op (for reductions) and every mode (in place, out of place, async) against numpy
references. Imported by the test (for the case names) and by the worker (to run them); needs
numpy, and torch only for the torch-tensor types.
"""
import numpy as np

REDUCING = ["allreduce", "reduce", "reduce_scatter", "reduce_scatterv"]
MOVING = ["broadcast", "allgather", "allgatherv", "gather", "gatherv", "scatter", "scatterv",
          "alltoall", "alltoallv", "sendrecv"]

# numpy types, bfloat16 as uint16 arrays tagged dtype=collx.bfloat16, torch tensors, and
# types that move as bytes (uint16: collx has no name for it; complex64 where nothing reduces).
TYPED = ["int8", "uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64",
         "torch.bfloat16", "torch.float32", "torch.int64"]
UNTYPED = ["uint16", "complex64"]

# bool reduces as uint8 (sum and prod as or and and), complex as pairs of reals (sum and avg),
# as in the torch backend (python/src/common/mapping.h).
CASES = ([(c, t) for c in REDUCING for t in TYPED] +
         [(c, t) for c in MOVING for t in TYPED + UNTYPED] +
         [("barrier", "none"), ("allreduce", "bool"), ("allreduce", "complex64")])

N = 5  # elements per rank's block


def case_id(coll, dtype):
    return "%s-%s" % (coll, dtype)


def is_int(dtype):
    return dtype.split(".")[-1] in ("int8", "uint8", "int32", "int64", "uint16")


def ops_for(dtype):
    ops = ["sum", "prod", "min", "max", "avg"]
    if is_int(dtype):
        ops += ["band", "bor", "bxor"]
    if dtype == "float32":
        ops += ["custom"]
    return ops


def values(rank, n, salt, op="sum", dtype="float32"):
    """Small integer values (exact in every type), per rank, as float64."""
    i = np.arange(n, dtype=np.int64)
    if op == "prod":
        v = 1 + (rank + i + salt) % 2
    elif op in ("band", "bor", "bxor"):
        v = (rank * 37 + i * 11 + salt * 5) % 100
    else:
        v = (rank * 3 + i * 5 + salt) % 9
        if dtype.split(".")[-1] in ("int8", "int32", "int64", "float16", "float32", "float64",
                                    "bfloat16"):
            v = v - 4
    return v.astype(np.float64)


def _bf16_bits(f64):
    bits = f64.astype(np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return bits.astype(np.uint16)


def encode(v, dtype, shape=None):
    """float64 values as an array (or tensor) of `dtype`."""
    if shape is not None:
        v = v.reshape(shape)
    if dtype.startswith("torch."):
        import torch

        return torch.tensor(v, dtype=getattr(torch, dtype[6:]))
    if dtype == "bfloat16":
        return _bf16_bits(v)
    if dtype == "complex64":
        return (v + 1j * (v + 1)).astype(np.complex64)
    return v.astype(dtype)


def decode(a, dtype):
    """An array (or tensor) of `dtype` back to float64 (complex: real and imaginary)."""
    if dtype.startswith("torch."):
        return a.double().numpy().reshape(-1)
    a = np.asarray(a).reshape(-1)
    if dtype == "bfloat16":
        return (a.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    if dtype == "complex64":
        return np.concatenate([a.real, a.imag]).astype(np.float64)
    return a.astype(np.float64)


def empty(n, dtype):
    if dtype.startswith("torch."):
        import torch

        return torch.full((n,), -7, dtype=getattr(torch, dtype[6:]))
    if dtype == "bfloat16":
        return np.full(n, 0xC0E0, dtype=np.uint16)  # -7.0
    # -7 wrapped into unsigned types (numpy 2 refuses an out-of-range fill value)
    return np.full(n, -7, dtype=np.int64).astype(dtype)


def reduce_ref(op, per_rank, dtype):
    stack = np.stack(per_rank)
    P = len(per_rank)
    if op == "sum":
        return stack.sum(0)
    if op == "prod":
        return stack.prod(0)
    if op in ("min",):
        return stack.min(0)
    if op in ("max", "custom"):
        return stack.max(0)
    if op == "avg":
        s = stack.sum(0)
        return np.trunc(s / P) if is_int(dtype) else s / P
    ints = stack.astype(np.int64)
    f = {"band": np.bitwise_and, "bor": np.bitwise_or, "bxor": np.bitwise_xor}[op]
    return f.reduce(ints, axis=0).astype(np.float64)


def tolerance(op, dtype):
    if op != "avg" or is_int(dtype):
        return 0.0
    name = dtype.split(".")[-1]
    return {"float16": 2e-3, "bfloat16": 1e-2, "float32": 1e-6, "float64": 1e-12}[name]
