"""The torch.distributed backend "collx" against backend "gloo" on identical inputs, in the
same processes (3 ranks, env:// rendezvous): every op and type of torch_cases, then
DistributedDataParallel training on both backends; once with small calls on the caller's
thread, once with every call in the background. Then init_process_group through tcp:// and
file://, and collx-run as torchrun: an unchanged torch script under it (test_launch runs
examples/torch_ddp.py so too)."""
import json
import pathlib
import shutil
import subprocess
import sys

import pytest

from conftest import WORKERS, base_env, run_collx
from test_launch import server_port

torch = pytest.importorskip("torch", reason="python3-torch is not importable by "
                            + sys.executable)
import collx  # noqa: E402

from torch_cases import CASES  # noqa: E402

if not any(name == "pytorch backend" and built for name, built, _ in collx.build_features()):
    pytest.skip("this build has no torch backend (COLLX_WITH_TORCH)", allow_module_level=True)

SCRIPT = WORKERS / "torch_backend.py"
NRANKS = 3


def launch(tmp_path, nranks, init, *flags, env_rdzv=False, timeout=120, env=None):
    procs, outs = [], []
    port = server_port()
    for r in range(nranks):
        out = tmp_path / ("rank%d.json" % r)
        outs.append(out)
        extra = dict(GLOO_SOCKET_IFNAME="lo", **(env or {}))
        if env_rdzv:
            extra.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=r, WORLD_SIZE=nranks)
        procs.append(subprocess.Popen(
            [sys.executable, str(SCRIPT), str(out), init, str(r), str(nranks)] + list(flags),
            env=base_env(**extra), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    logs = []
    for p in procs:
        try:
            logs.append(p.communicate(timeout=timeout)[0])
        except subprocess.TimeoutExpired:
            p.kill()
            logs.append(p.communicate()[0] + "\n(killed after %d s)" % timeout)
    results = []
    for r, (p, out) in enumerate(zip(procs, outs)):
        if not out.exists():
            return "rank %d wrote no results (exit %s):\n%s" % (r, p.returncode, logs[r][-6000:])
        results.append(json.loads(out.read_text()))
    return results


# Small collectives run on the caller's thread (COLLX_TORCH_EAGER_BYTES, 64 KiB); the second
# run sends every op to the background (work handles, futures, the completion thread).
MODES = {"eager": {}, "background": {"COLLX_TORCH_EAGER_BYTES": "0"}}


@pytest.fixture(scope="module", params=sorted(MODES))
def env_run(request, tmp_path_factory):
    # One launch per mode; a failed launch fails every test of the mode with its output.
    return launch(tmp_path_factory.mktemp("torch_" + request.param), NRANKS, "env://",
                  env_rdzv=True, env=MODES[request.param])


def outcome(results, case):
    if isinstance(results, str):
        pytest.fail(results)
    bad = [r.get(case, "not run (an earlier case failed the group)") for r in results]
    bad = [b for b in bad if b != "ok"]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("case", CASES)
def test_op_matches_gloo(env_run, case):
    outcome(env_run, case)
    assert all(r["backend"] == "collx" for r in env_run)


def test_ddp_matches_gloo(env_run):
    outcome(env_run, "ddp")


@pytest.mark.parametrize("scheme", ["tcp", "file"])
def test_init_method(tmp_path, scheme):
    init = ("tcp://127.0.0.1:%d" % server_port() if scheme == "tcp"
            else "file://%s" % (tmp_path / "rendezvous"))
    results = launch(tmp_path, 2, init, "--smoke", "--no-ddp")
    for case in ("all_reduce-float32", "all_gather_into_tensor-float32", "broadcast-int64",
                 "barrier", "future"):
        outcome(results, case)


def test_backend_is_documented_and_registered():
    import torch.distributed as dist

    import collx.torch as backend

    assert backend.__doc__ and backend.create_process_group.__doc__
    assert backend.ProcessGroupCollx.__doc__ and backend.ProcessGroupCollx.__init__.__doc__
    assert "COLLX" in dist.Backend._plugins
    # torch 2.x: a c10d Backend behind torch's ProcessGroup; torch 1.13: the ProcessGroup
    base = (dist.ProcessGroup if torch.__version__.startswith("1.")
            else torch._C._distributed_c10d.Backend)
    assert issubclass(backend.ProcessGroupCollx, base)


def test_dtype_and_op_mapping_is_the_modules():
    """The backend (from a tensor's ScalarType and a c10d ReduceOp) and the module (from a
    tensor's dtype name and a dist.ReduceOp object) map every torch type and op alike: one
    table (python/src/common/mapping.h), reached two ways."""
    import torch.distributed as dist

    from collx import _collx, _collx_torch

    def mapped(f, tensor, op):
        try:
            return f(tensor, op)
        except collx.Error as e:
            return type(e).__name__, str(e)

    types = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
             torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64,
             torch.complex128]
    ops = [None] + [getattr(dist.ReduceOp, name) for name in (
        "SUM", "PRODUCT", "MIN", "MAX", "AVG", "BAND", "BOR", "BXOR", "PREMUL_SUM")]
    table = {}
    for dtype in types:
        for op in ops:
            t = torch.zeros(2, dtype=dtype)
            table[dtype, op] = mapped(_collx_torch._mapping, t, op)
            assert mapped(_collx._mapping, t, op) == table[dtype, op], (dtype, op)
    S = dist.ReduceOp
    assert table[torch.bool, S.SUM] == ("uint8", 1, "bor")
    assert table[torch.bool, S.AVG][0] == "InvalidArgument"
    assert table[torch.complex64, S.SUM] == ("float32", 2, "sum")
    assert table[torch.complex128, S.MAX][0] == "InvalidArgument"
    assert table[torch.int16, None] == ("uint8", 2, None)
    assert table[torch.int16, S.SUM][0] == "InvalidArgument"
    assert table[torch.bfloat16, S.MIN] == ("bfloat16", 1, "min")
    assert "PREMUL_SUM" in table[torch.float32, S.PREMUL_SUM][1]


# A torch script as torchrun would run it: nothing but torchrun's variables, and collx's own
# context (COLLX_STORE) beside torch's group (its TCPStore at MASTER_ADDR:MASTER_PORT).
TORCHRUN_SCRIPT = """
import os, numpy as np, torch, torch.distributed as dist, collx, collx.torch
dist.init_process_group("collx")
r, p = dist.get_rank(), dist.get_world_size()
e = os.environ
assert (r, p) == (int(e["RANK"]), int(e["WORLD_SIZE"])) == (int(e["COLLX_RANK"]), p), e
assert (int(e["LOCAL_RANK"]), int(e["LOCAL_WORLD_SIZE"]), e["GROUP_RANK"]) == (r, p, "0"), e
assert e["MASTER_ADDR"] == "127.0.0.1", e["MASTER_ADDR"]
assert not e["COLLX_STORE"].endswith(":" + e["MASTER_PORT"]), (e["COLLX_STORE"], e["MASTER_PORT"])
t = torch.full((5,), float(r + 1))
dist.all_reduce(t)
assert t.tolist() == [p * (p + 1) / 2] * 5, t
ctx = collx.init()
x = np.full(3, r + 1.0)
ctx.allreduce(x)
assert x.tolist() == [p * (p + 1) / 2] * 3, x
assert ctx.rank == r and ctx.size == p
ctx.close()
dist.barrier()
dist.destroy_process_group()
print("rank %d of %d ok" % (r, p))
"""


def test_torch_script_under_collx_run(tmp_path):
    script = tmp_path / "plain_torch.py"
    script.write_text(TORCHRUN_SCRIPT)
    proc = run_collx(3, script, timeout=120, env=base_env(GLOO_SOCKET_IFNAME="lo"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for r in range(3):
        assert "rank %d of 3 ok" % r in proc.stdout, proc.stdout + proc.stderr


def make_certificates(directory):
    """A CA and a certificate it signed (tests/util/make_tls_certs.sh: docs/running.md's
    OpenSSL lines); (cert, key, ca)."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed (apt-get install openssl)")
    script = pathlib.Path(__file__).resolve().parents[2] / "tests" / "util" / "make_tls_certs.sh"
    subprocess.run(["sh", str(script), str(directory)], check=True, capture_output=True)
    return directory / "node.pem", directory / "node.key", directory / "ca.pem"


def test_torch_script_over_tls_under_collx_run(tmp_path):
    # COLLX_TLS=1: the backend's context takes TLS from the environment (collx.tlsOf), as
    # the ranks' own bootstrap would; every rank logs that its tcp connections are in TLS.
    cert, key, ca = make_certificates(tmp_path)
    script = tmp_path / "plain_torch.py"
    script.write_text(TORCHRUN_SCRIPT)
    env = base_env(GLOO_SOCKET_IFNAME="lo", COLLX_TRANSPORT="tcp", COLLX_TLS="1",
                   COLLX_TLS_CERT=cert, COLLX_TLS_KEY=key, COLLX_TLS_CA=ca,
                   COLLX_LOG_LEVEL="warn,collx.tcp=info")
    proc = run_collx(3, script, timeout=120, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for r in range(3):
        assert "rank %d of 3 ok" % r in proc.stdout, proc.stdout + proc.stderr
    assert proc.stderr.count("TLS on the tcp connections between ranks: TLSv1.3") >= 3, \
        proc.stderr



# A rank of a torch job that never makes a call: the other's dist.all_reduce fails at its
# deadline with collx's diagnosis of the job in its message, and collx.torch.dump_state()
# names the rank before that.
HANG_SCRIPT = """
import datetime, time, torch, torch.distributed as dist, collx, collx.torch
dist.init_process_group("collx", timeout=datetime.timedelta(seconds=5))
r = dist.get_rank()
dist.barrier()
if r == 1:
    time.sleep(8)
else:
    import threading
    seen = {}
    def ask():
        time.sleep(0.3)
        seen["report"] = collx.torch.dump_state()
    t = threading.Thread(target=ask)
    t.start()
    try:
        dist.all_reduce(torch.ones(4))
        print("no error")
    except RuntimeError as e:
        t.join()
        print("error class", type(e).__name__)
        print("error has report", "collx hang report" in str(e))
        print("error names rank 1", "rank 1: has not called allreduce#" in str(e))
        print("dump names rank 1", "rank 1: has not called allreduce#" in seen["report"])
"""


def test_torch_error_carries_the_hang_report(tmp_path):
    script = tmp_path / "hang_torch.py"
    script.write_text(HANG_SCRIPT)
    proc = run_collx(2, script, timeout=120,
                     env=base_env(COLLX_HANG_REPORT_AFTER="1s", GLOO_SOCKET_IFNAME="lo"))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    for line in ("error class TimeoutError", "error has report True", "error names rank 1 True",
                 "dump names rank 1 True"):
        assert line in proc.stdout, out


# collx.torch.all_reduce (a C function) against its Python path, _all_reduce_py, on one rank:
# the same results and the same errors for the same arguments, the op and group caches, and
# destroy_process_group still freeing the backends the cache knew.
FAST_ENTRY_SCRIPT = """
import gc, inspect, sys, weakref, torch, torch.distributed as dist, collx, collx.torch as ct
dist.init_process_group("collx", init_method="file://" + sys.argv[1], rank=0, world_size=1)
assert str(inspect.signature(ct.all_reduce)) == "(tensor, op='sum', group=None)"
assert "fastest all_reduce" in ct.all_reduce.__doc__
sub = dist.new_group([0], backend="collx")

def outcome(f, *args, **kwargs):
    t = torch.arange(6, dtype=torch.float32)
    try:
        got = f(t, *args, **kwargs)
    except Exception as e:
        return type(e).__name__, str(e).split(chr(10))[0]
    return got is t, t.tolist()

calls = [(), ("max",), ("avg", None), ("bor",), (dist.ReduceOp.SUM,), (dist.ReduceOp.MIN, sub),
         (dist.ReduceOp.MIN, sub), ("nope",), (1.5,), (dist.ReduceOp.PREMUL_SUM,), ("sum", 7)]
for args in calls:
    assert outcome(ct.all_reduce, *args) == outcome(ct._all_reduce_py, *args), args
assert outcome(ct.all_reduce, op="max", group=sub) == (True, [0.0, 1.0, 2.0, 3.0, 4.0, 5.0])
try:
    ct.all_reduce(torch.zeros(4, 3).t())
except collx.InvalidArgument as e:
    assert "not contiguous" in str(e), e
else:
    raise AssertionError("a non-contiguous tensor was accepted")
bad = [((), {}), ((torch.ones(1), "sum", None, 1), {}), ((torch.ones(1),), {"tensor": 1}),
       ((torch.ones(1),), {"opp": "sum"}), ((3,), {})]
for args, kwargs in bad:
    try:
        ct.all_reduce(*args, **kwargs)
    except TypeError:
        pass
    else:
        raise AssertionError("accepted %r %r" % (args, kwargs))
backends = [weakref.ref(ct.backend_of()), weakref.ref(ct.backend_of(sub))]
dist.destroy_process_group(sub)
del sub, calls, args  # (the last two name it too)
dist.destroy_process_group()
gc.collect()
assert [b() for b in backends] == [None, None], "a backend outlived its group"
try:
    ct.all_reduce(torch.ones(1))
except (RuntimeError, ValueError) as e:
    assert "not been initialized" in str(e), e
else:
    raise AssertionError("a call without a default group was accepted")
compiler = getattr(torch, "compiler", None)
if hasattr(compiler, "_is_compiling_flag") and hasattr(torch.library, "custom_op"):
    # As torch.export sets it: the custom op's path (whose call keeps the group alive in
    # torch 2.6, hence last).
    dist.init_process_group("collx", init_method="file://" + sys.argv[1] + "2", rank=0,
                            world_size=1)
    compiler._is_compiling_flag = True
    try:
        assert outcome(ct.all_reduce, "max") == (True, [0.0, 1.0, 2.0, 3.0, 4.0, 5.0])
    finally:
        compiler._is_compiling_flag = False
    dist.destroy_process_group()
print("fast entry ok")
"""


def test_fast_entry_matches_its_python_path(tmp_path):
    script = tmp_path / "fast_entry.py"
    script.write_text(FAST_ENTRY_SCRIPT)
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "rdzv")],
                          env=base_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "fast entry ok" in proc.stdout, proc.stdout + proc.stderr
