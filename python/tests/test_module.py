"""The module itself, in this process (a world of one over an in-process store): argument
handling, clear errors for what collx cannot move, exception classes, docstrings, the type
stubs against the module."""
import array
import ast
import datetime
import inspect
import os
import pathlib

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
                collx.Unsupported, collx.Aborted, collx.RevokedError, collx.ExcludedError):
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
    # (collx type, units per element, op applied): python/src/common/mapping.h, which the
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


# ---- the type stubs (python/collx/*.pyi) -------------------------------------------------
# An editor completes collx.Context and its methods from the stubs, not from the compiled
# module: these tests compare them with the real module, so that a method, property or
# argument added to the bindings fails here until the stubs have it too.

def _stub(name):
    """The stub file `name` of the imported package (the build copies them next to the
    modules, an install installs them there): its module-level nodes and classes by name."""
    path = pathlib.Path(collx.__file__).resolve().parent / name
    assert path.exists(), ("%s is missing beside the package's modules: python/CMakeLists.txt "
                           "copies and installs python/collx/%s" % (path, name))
    tree = ast.parse(path.read_text(), str(path))
    names, classes = {}, {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            classes[node.name] = node
            names[node.name] = node
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.setdefault(node.name, []).append(node)  # a list: overloads
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = node
        elif isinstance(node, ast.Assign):
            names.update((t.id, node) for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.ImportFrom):
            # A stub re-exports an imported name only as "import X as X".
            names.update((a.name, node) for a in node.names if a.asname == a.name)
    return names, classes


def _members(cls_node, classes):
    """A stub class's members by name, its stub base classes' included: {name: [nodes]}."""
    members = {}
    for base in cls_node.bases:
        if isinstance(base, ast.Name) and base.id in classes:
            members.update(_members(classes[base.id], classes))
    for node in cls_node.body:
        if isinstance(node, ast.FunctionDef):
            members.setdefault(node.name, []).append(node)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            members[node.target.id] = [node]
    return members


def _decorators(fn):
    return {d.id for d in fn.decorator_list if isinstance(d, ast.Name)}


def _outside_quotes(text, start=0):
    """(index, character, bracket depth after it) of each character of text from start that
    stands outside quotes."""
    depth, quote = 0, None
    for i in range(start, len(text)):
        ch = text[i]
        if quote:
            quote = None if ch == quote else quote
            continue
        if ch in "'\"":
            quote = ch
            continue
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        yield i, ch, depth


def _split_top_level(text):
    """text split at the commas outside brackets and quotes."""
    parts, start = [], 0
    for i, ch, depth in _outside_quotes(text):
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _runtime_params(fn):
    """A pybind11 function's arguments as its docstring's signature line states them
    ("allreduce(self: ..., array: handle, out: handle = None, *, dtype: ...) -> object"):
    [(name, kind, has_default)], kind 'positional', 'keyword', '*args' or '**kwargs'."""
    line = (fn.__doc__ or "").lstrip().split("\n", 1)[0]
    start = line.find("(")
    end = next((i for i, ch, depth in _outside_quotes(line, max(start, 0))
                if ch in ")]}" and depth == 0), -1)
    assert start > 0 and end > start, "no signature line in the docstring of %r: %r" % (fn, line)
    params, kind = [], "positional"
    for part in _split_top_level(line[start + 1:end]):
        if part == "*":
            kind = "keyword"
            continue
        name = part.split(":", 1)[0].split("=", 1)[0].strip()
        if name.startswith("**"):
            params.append((name[2:], "**kwargs", False))
        elif name.startswith("*"):
            params.append((name[1:], "*args", False))
            kind = "keyword"
        else:
            params.append((name, kind, "=" in part))
    if params and params[0][0] == "self":
        params = params[1:]
    return params


def _signature_params(fn):
    """A Python function's arguments, as _runtime_params gives them."""
    kinds = {inspect.Parameter.POSITIONAL_ONLY: "positional",
             inspect.Parameter.POSITIONAL_OR_KEYWORD: "positional",
             inspect.Parameter.KEYWORD_ONLY: "keyword",
             inspect.Parameter.VAR_POSITIONAL: "*args",
             inspect.Parameter.VAR_KEYWORD: "**kwargs"}
    return [(p.name, kinds[p.kind], p.default is not inspect.Parameter.empty)
            for p in inspect.signature(fn).parameters.values()]


def _stub_params(fn, method):
    """A stub function's arguments, as _runtime_params gives them (without self)."""
    a = fn.args
    positional = a.posonlyargs + a.args
    if method and "staticmethod" not in _decorators(fn):
        positional = positional[1:]
    first_default = len(positional) - len(a.defaults)
    params = [(p.arg, "positional", i >= first_default) for i, p in enumerate(positional)]
    if a.vararg:
        params.append((a.vararg.arg, "*args", False))
    params += [(p.arg, "keyword", d is not None) for p, d in zip(a.kwonlyargs, a.kw_defaults)]
    if a.kwarg:
        params.append((a.kwarg.arg, "**kwargs", False))
    return params


def _compare_params(what, runtime, overloads, method, problems):
    """Every overload takes the runtime's arguments (names, order, positional or keyword);
    the last, the general one, has the same defaults too (an earlier one may require an
    argument, as async_op=True selects the overload that returns a Work)."""
    for i, fn in enumerate(overloads):
        stub = _stub_params(fn, method)
        if i == len(overloads) - 1:
            if stub != runtime:
                problems.append("%s: the stub takes %s, the module %s" % (what, stub, runtime))
        elif [p[:2] for p in stub] != [p[:2] for p in runtime]:
            problems.append("%s (overload %d): the stub takes %s, the module %s"
                            % (what, i + 1, [p[:2] for p in stub], [p[:2] for p in runtime]))


def _public_members(cls):
    """The members a stub must have: public names, and the context manager's methods."""
    inherited = set()
    for base in cls.__mro__[1:]:
        if base.__module__ in ("builtins", "pybind11_builtins"):
            inherited.update(dir(base))
    return sorted(n for n in dir(cls) if n not in inherited
                  and (not n.startswith("_") or n in ("__enter__", "__exit__")))


def _check_class(stub_name, cls, stub_classes, problems):
    node = stub_classes.get(cls.__name__)
    if node is None:
        problems.append("%s has no class %s" % (stub_name, cls.__name__))
        return
    members = _members(node, stub_classes)
    for name in _public_members(cls):
        what = "%s: %s.%s" % (stub_name, cls.__name__, name)
        member = inspect.getattr_static(cls, name)
        nodes = members.get(name)
        if nodes is None:
            problems.append("%s is missing" % what)
        elif isinstance(member, property):
            if not any("property" in _decorators(n) for n in nodes
                       if isinstance(n, ast.FunctionDef)):
                problems.append("%s is a property in the module, not in the stub" % what)
        elif callable(getattr(cls, name)) and not inspect.isclass(getattr(cls, name)):
            fns = [n for n in nodes if isinstance(n, ast.FunctionDef)]
            if not fns or any("property" in _decorators(n) for n in fns):
                problems.append("%s is a method in the module, not in the stub" % what)
            else:
                _compare_params(what, _runtime_params(getattr(cls, name)), fns, True, problems)


def test_stubs_cover_the_module():
    module = collx._collx
    names, classes = _stub("_collx.pyi")
    problems = []
    for name in sorted(n for n in dir(module) if not n.startswith("__") or n == "__version__"):
        value = getattr(module, name)
        if name not in names:
            problems.append("_collx.pyi lacks %s" % name)
        elif inspect.isclass(value):
            _check_class("_collx.pyi", value, classes, problems)
        elif callable(value):
            _compare_params("_collx.pyi: " + name, _runtime_params(value), names[name], False,
                            problems)
    assert not problems, "python/collx/_collx.pyi is behind the module:\n" + "\n".join(problems)


def test_stubs_cover_the_package():
    names, _ = _stub("__init__.pyi")
    problems = ["__init__.pyi lacks %s (in collx.__all__)" % n
                for n in collx.__all__ + ["__version__"] if n not in names]
    if "init" in names:
        _compare_params("__init__.pyi: init", _signature_params(collx.init), names["init"],
                        False, problems)
    assert not problems, "python/collx/__init__.pyi is behind collx:\n" + "\n".join(problems)
    marker = pathlib.Path(collx.__file__).resolve().parent / "py.typed"
    assert marker.exists(), "%s is missing: type checkers ignore the stubs without it" % marker


def test_stubs_cover_the_torch_backend():
    if not any(n == "pytorch backend" and b for n, b, _ in collx.build_features()):
        pytest.skip("this build has no torch backend (COLLX_WITH_TORCH)")
    pytest.importorskip("torch", reason="python3-torch is not installed")
    import collx.torch as backend  # built: an import error here is a failure, not a skip
    names, classes = _stub("torch.pyi")
    problems = ["torch.pyi lacks %s (in collx.torch.__all__)" % n
                for n in backend.__all__ if n not in names]
    cls = backend.ProcessGroupCollx
    if cls.__name__ in classes:
        # Only what it defines: what it inherits is torch's.
        members = _members(classes[cls.__name__], classes)
        for name in sorted(n for n in vars(cls) if not n.startswith("_") or n == "__init__"):
            what = "torch.pyi: ProcessGroupCollx.%s" % name
            member = vars(cls)[name]
            if name not in members:
                problems.append("%s is missing" % what)
            elif not isinstance(member, property):
                _compare_params(what, _runtime_params(getattr(cls, name)), members[name], True,
                                problems)
    for name in backend.__all__:
        if isinstance(names.get(name), list):  # a function's overloads
            _compare_params("torch.pyi: " + name, _signature_params(getattr(backend, name)),
                            names[name], False, problems)
    assert not problems, "python/collx/torch.pyi is behind collx.torch:\n" + "\n".join(problems)


def test_elastic_state_commit_keeps_a_copy_that_restore_brings_back():
    from collx import elastic
    w = np.arange(6, dtype=np.float32)
    state = elastic.State(w=w)
    state.w += 1            # in place: the live array changes, the commit does not
    state.step = 4
    state.commit()
    kept = state._committed[1]["w"]
    assert kept is not w
    state.w *= 10
    state.step = 5
    state.restore()
    assert state.w is w and state.step == 4
    assert list(w) == [1, 2, 3, 4, 5, 6]
    # A commit after goes into the same copy (same shape and type), and stays apart from w.
    state.w += 1
    state.commit()
    assert state._committed[1]["w"] is kept
    w[...] = 0
    state.restore()
    assert list(w) == [2, 3, 4, 5, 6, 7]
    # An array that changed its shape gets a new copy.
    state2 = elastic.State(v=np.zeros(3, np.int64))
    first = state2._committed[1]["v"]
    object.__getattribute__(state2, "_arrays")["v"] = np.ones(5, np.int64)
    state2.commit()
    assert state2._committed[1]["v"] is not first
    assert list(state2._committed[1]["v"]) == [1] * 5
