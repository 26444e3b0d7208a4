"""The module itself, in this process (a world of one over an in-process store): argument
handling, clear errors for what collx cannot move, exception classes, docstrings."""
import array
import datetime
import inspect
import os

import numpy as np
import pytest

import collx


@pytest.fixture(scope="module")
def ctx():
    c = collx.init(rank=0, size=1, store="hash://", job_id="test-module", timeout=30)
    yield c
    c.close()


def test_every_public_name_has_a_docstring():
    missing = []
    for owner in (collx, collx.Context, collx.Work, collx.ReduceOp, collx.DataType):
        for name, member in inspect.getmembers(owner):
            if name.startswith("_") or isinstance(member, (int, str, collx.DataType,
                                                             collx.ReduceOp)):
                continue
            if owner is collx.DataType and name in ("name", "value"):
                continue  # pybind11's own enum properties
            if callable(member) or isinstance(member, property) or inspect.isclass(member):
                if not (getattr(member, "__doc__", None) or "").strip():
                    missing.append("%s.%s" % (getattr(owner, "__name__", owner), name))
    assert not missing, missing


def test_exception_classes():
    for cls in (collx.IoError, collx.TimeoutError, collx.InvalidArgument, collx.MismatchError,
                collx.Unsupported, collx.Aborted):
        assert issubclass(cls, collx.Error) and cls.__doc__
    assert issubclass(collx.Error, RuntimeError)
    assert issubclass(collx.InvalidArgument, ValueError)


def test_context_properties(ctx):
    assert (ctx.rank, ctx.size, ctx.job_id) == (0, 1, "test-module")
    assert ctx.timeout == 30.0
    assert ctx.transports == ["self"]
    assert ctx.shared_memory  # a world of one shares memory with itself
    assert ctx.peers[0]["rank"] == 0 and ctx.peers[0]["pid"] > 0
    assert "rank 0 of 1" in repr(ctx)


def test_stats_and_no_trace_by_default():
    c = collx.init(rank=0, size=1, store="hash://", job_id="test-stats")
    with c:
        c.allreduce(np.ones(8, np.float32), algorithm="ring")
        c.barrier()
        s = c.stats()
        assert c.trace_path == ""
    assert s["calls"] == 2 and s["failed_calls"] == 0, s
    assert s["collectives"] == {"allreduce": 1, "barrier": 1}, s
    assert {"collective": "allreduce", "algorithm": "ring", "calls": 1, "bytes": 32} in \
        s["algorithms"], s
    assert s["peers"] == [] and s["messages_sent"] == 0, s  # a world of one sends nothing
    assert isinstance(s["waiting_s"], float) and isinstance(s["transports"], dict), s


def test_closed_context_refuses_calls():
    c = collx.init(rank=0, size=1, store="hash://", job_id="test-closed")
    with c:
        c.barrier()
    assert c.closed
    with pytest.raises(collx.InvalidArgument, match="closed"):
        c.allreduce(np.ones(2))


def test_every_collective_in_a_world_of_one(ctx):
    x = np.arange(6, dtype=np.float32)
    assert ctx.allreduce(x.copy(), op="max").tolist() == x.tolist()
    assert ctx.reduce(x.copy(), root=0).tolist() == x.tolist()
    assert ctx.broadcast(x.copy()).tolist() == x.tolist()
    assert ctx.allgather(x).shape == (1, 6)
    assert ctx.allgatherv(x, [6]).tolist() == x.tolist()
    assert ctx.reduce_scatter(x).tolist() == x.tolist()
    assert ctx.reduce_scatterv(x, [6]).tolist() == x.tolist()
    assert ctx.gather(x).shape == (1, 6)
    assert ctx.gatherv(x, [6]).tolist() == x.tolist()
    assert ctx.scatter(x).tolist() == x.tolist()
    assert ctx.scatterv(x, [6], np.empty(6, np.float32)).tolist() == x.tolist()
    assert ctx.alltoall(x).tolist() == x.tolist()
    assert ctx.alltoallv(x, [6], np.empty(6, np.float32), [6]).tolist() == x.tolist()
    ctx.barrier()
    w = ctx.recv(np.empty(6, np.float32), 0, tag=3, async_op=True)
    ctx.send(x, 0, tag=3)
    assert w.result().tolist() == x.tolist()


def test_buffer_protocol_objects(ctx):
    b = bytearray(b"\x01\x02\x03")
    assert ctx.allreduce(b) is b
    a = array.array("i", [1, 2, 3])
    ctx.allreduce(a, op=collx.ReduceOp.MAX)
    out = bytearray(3)
    ctx.allreduce(b"\x05\x06\x07", out)  # a read-only input, out of place
    assert bytes(out) == b"\x05\x06\x07"
    m = memoryview(bytearray(8)).cast("f")
    ctx.allreduce(m)


def test_non_contiguous_input_is_refused_clearly(ctx):
    x = np.zeros((4, 4), np.float32)[:, 1]
    with pytest.raises(collx.InvalidArgument, match=r"rank 0: allreduce: the input is not "
                                                    r"contiguous .*strides \(16,\).*"
                                                    r"ascontiguousarray"):
        ctx.allreduce(x)
    with pytest.raises(collx.InvalidArgument, match="out is not contiguous"):
        ctx.allgather(np.zeros(2, np.float32), np.zeros((2, 2), np.float32)[:, 0])


def test_non_contiguous_tensor_is_refused_clearly(ctx):
    torch = pytest.importorskip("torch", reason="python3-torch is not installed")
    t = torch.zeros(3, 4).t()
    with pytest.raises(collx.InvalidArgument, match=r"not contiguous.*x.contiguous\(\)"):
        ctx.allreduce(t)
    ctx.allreduce(t.contiguous())


def test_read_only_output_is_refused(ctx):
    with pytest.raises(collx.InvalidArgument, match="read-only"):
        ctx.allreduce(b"\x01\x02")
    ro = np.ones(3)
    ro.flags.writeable = False
    with pytest.raises(collx.InvalidArgument, match="read-only"):
        ctx.allreduce(ro)


def test_objects_that_are_not_buffers(ctx):
    with pytest.raises(TypeError, match="expected a buffer"):
        ctx.allreduce([1, 2, 3])


def test_types_without_a_collx_name(ctx):
    u16 = np.arange(4, dtype=np.uint16)
    with pytest.raises(collx.InvalidArgument, match=r"uint16 .*dtype=collx.bfloat16"):
        ctx.allreduce(u16)
    assert ctx.allgather(u16).dtype == np.uint16  # moved as bytes
    ctx.allreduce(u16, dtype=collx.bfloat16)
    ctx.allreduce(u16, dtype="bf16")
    with pytest.raises(collx.InvalidArgument, match="not a whole number of float32"):
        ctx.allreduce(np.zeros(3, np.uint16), dtype=collx.float32)
    with pytest.raises(collx.InvalidArgument, match="not a collx type"):
        ctx.allreduce(u16, dtype="uint16")
    with pytest.raises(collx.InvalidArgument):
        ctx.allreduce(np.zeros(2, ">f4"))  # big-endian


def test_ops(ctx):
    x = np.ones(3, np.int32)
    for op in ("sum", "PROD", "min", collx.ReduceOp.MAX, "avg", "band", "bor", "bxor",
               "ReduceOp.SUM"):
        ctx.allreduce(x, op=op)
    with pytest.raises(collx.InvalidArgument, match="not a reduce op"):
        ctx.allreduce(x, op="median")
    with pytest.raises(collx.InvalidArgument, match="band"):
        ctx.allreduce(np.ones(3, np.float32), op="band")
    custom = collx.ReduceOp.custom(lambda a, b: a + b, "plus", commutative=False)
    assert custom.kind == "custom" and custom.name == "plus" and not custom.commutative
    assert collx.ReduceOp.SUM == collx.ReduceOp.SUM and collx.ReduceOp.SUM != custom


def test_types_and_ops_map_as_in_the_torch_backend(ctx):
    # (collx type, units per element, op applied): python/src/shared/mapping.h, which the
    # torch backend reads too (test_torch_backend compares the two on every torch type).
    mapping = collx._collx._mapping
    assert mapping(np.zeros(2, np.complex64), "sum") == ("float32", 2, "sum")
    assert mapping(np.zeros(2, np.complex128), "avg") == ("float64", 2, "avg")
    assert mapping(np.zeros(2, np.complex64)) == ("uint8", 8, None)  # moved as bytes
    assert mapping(np.zeros(2, bool), "sum") == ("uint8", 1, "bor")
    assert mapping(np.zeros(2, bool), "PRODUCT") == ("uint8", 1, "band")
    assert mapping(np.zeros(2, np.int32), "ReduceOp.MAX") == ("int32", 1, "max")
    with pytest.raises(collx.InvalidArgument, match="complex64 elements, which collx cannot "
                                                    "reduce with max"):
        ctx.allreduce(np.zeros(2, np.complex64), op="max")
    with pytest.raises(collx.InvalidArgument, match="avg of bool"):
        ctx.allreduce(np.zeros(2, bool), op="avg")
    z = np.array([1 + 2j, 3 - 4j], np.complex64)
    assert ctx.allreduce(z.copy(), op="avg").tolist() == z.tolist()


def test_torch_reduce_ops_are_accepted(ctx):
    torch = pytest.importorskip("torch", reason="python3-torch is not installed")
    import torch.distributed as dist

    x = np.arange(3, dtype=np.int32)
    assert ctx.allreduce(x.copy(), op=dist.ReduceOp.MAX).tolist() == x.tolist()
    assert collx._collx._mapping(torch.zeros(2, dtype=torch.bool), dist.ReduceOp.PRODUCT) == (
        "uint8", 1, "band")
    with pytest.raises(collx.InvalidArgument, match="PREMUL_SUM"):
        ctx.allreduce(x, op=dist.ReduceOp.PREMUL_SUM)


def test_options(ctx):
    x = np.ones(4, np.float32)
    ctx.allreduce(x, timeout=datetime.timedelta(seconds=5), algorithm="ring")
    with pytest.raises(collx.InvalidArgument, match="valid"):
        ctx.allreduce(x, algorithm="no_such_algorithm")
    with pytest.raises(collx.InvalidArgument, match="positive"):
        ctx.allreduce(x, timeout=0)
    with pytest.raises(collx.InvalidArgument, match="outside"):
        ctx.broadcast(x, root=3)


def test_work(ctx):
    w = ctx.allreduce(np.ones(4, np.float32), async_op=True)
    assert w.wait(timeout=10) is True and w.is_completed() and w.exception() is None
    assert w.result().tolist() == [1, 1, 1, 1]


def test_config_and_build():
    config = {v["name"]: v for v in collx.config()}
    assert "COLLX_TIMEOUT" in config and "COLLX_TORCH_EAGER_BYTES" in config
    timeout = config["COLLX_TIMEOUT"]
    assert timeout["type"] == "duration" and timeout["range"] == "at least 1ms"
    assert timeout["component"] == "rendezvous" and timeout["automatic"] is False
    # conftest.py sets COLLX_TIMEOUT for the suite.
    assert timeout["set"] is True and timeout["source"] == "environment"
    assert timeout["default"] == "300s" and timeout["value"] == os.environ["COLLX_TIMEOUT"]
    streams = config["COLLX_TCP_STREAMS"]
    assert streams["range"] == "[1, 64]" and streams["default"] == "1"
    assert streams["source"] == "default" and streams["value"] == "1"
    ring = config["COLLX_SHM_RING_BYTES"]
    assert ring["automatic"] is True and ring["default"] == "" and ring["source"] == "automatic"
    assert "1MiB" in ring["automatic_rule"]
    assert all(len(v["help"]) > 20 for v in config.values())
    features = {name: built for name, built, _ in collx.build_features()}
    assert features["python module"] is True
    assert collx.__version__.count(".") == 2
    assert collx.DataType.BFLOAT16.itemsize == 2 and collx.bfloat16 == collx.DataType.BFLOAT16
