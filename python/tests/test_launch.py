"""Ways in: collx-run running Python, explicit rank/size/store, torchrun's variables, and the
installed package."""
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys

import pytest

from conftest import WORKERS, _steers_collx, base_env, build_dir, collx_run, run_collx

ROOT = pathlib.Path(__file__).resolve().parents[2]

SNIPPET = """
import numpy as np, collx
ctx = collx.init({args})
x = np.full(3, ctx.rank + 1.0)
ctx.allreduce(x)
assert x.tolist() == [sum(range(1, ctx.size + 1))] * 3, x
print("rank", ctx.rank, "of", ctx.size, "ok")
ctx.close()
"""


def _server_port_range():
    low, high = 32768, 60999  # Linux's defaults
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = map(int, f.read().split())
    except (OSError, ValueError):
        pass
    if low - 1 >= 21000:
        return 20000, low - 1
    if high + 1001 <= 65535:
        return high + 1, 65535
    raise RuntimeError("server_port: no room outside the ephemeral ports %d-%d" % (low, high))


_SERVER_PORTS = _server_port_range()
_next_port = (os.getpid() * 7919) % (_SERVER_PORTS[1] - _SERVER_PORTS[0] + 1)


def server_port():
    """A port for a process that binds it itself (torchrun's MASTER_PORT, a store): below the
    kernel's ephemeral range, which no bind to port 0 and no outgoing connection ever gets (a
    port released after a bind to port 0 could be handed to a parallel test's socket before the
    child binds it), so only another caller of this function or of the C++ suites'
    test::serverPort() could take it; spread by pid, one step per call, checked bindable."""
    global _next_port
    first, last = _SERVER_PORTS
    span = last - first + 1
    for _ in range(span):
        port = first + _next_port % span
        _next_port += 1
        with socket.socket() as s:
            try:
                s.bind(("", port))
            except OSError:
                continue
        return port
    raise RuntimeError("server_port: no bindable port in %d-%d" % (first, last))


def run_each(nranks, code_of, env_of, timeout=60):
    procs = [subprocess.Popen([sys.executable, "-c", code_of(r)], env=env_of(r),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(nranks)]
    outs = []
    for p in procs:
        try:
            outs.append((p.communicate(timeout=timeout)[0], p.returncode))
        except subprocess.TimeoutExpired:
            p.kill()
            outs.append((p.communicate()[0] + "\n(killed)", -9))
    return outs


def test_callers_variables_are_dropped():
    # conftest.py: hermetic suites (ctest's python_hermetic runs this with the caller's
    # COLLX_TRANSPORT, COLLX_TIMEOUT, RANK, ... set)
    steering = {k: v for k, v in os.environ.items() if _steers_collx(k)}
    assert steering == {"COLLX_TIMEOUT": "60s"}
    assert not {k for k in base_env() if _steers_collx(k)} - {"COLLX_TIMEOUT"}


def test_collx_run_runs_the_numpy_example():
    # the form of docs/python.md: collx-run -n 4 /usr/bin/python3 script.py
    proc = run_collx(4, ROOT / "examples" / "numpy_collectives.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "4 ranks, 40000 rows" in proc.stdout


def test_explicit_rank_size_and_store(tmp_path):
    store = "file://%s" % tmp_path
    outs = run_each(2, lambda r: SNIPPET.format(args="rank=%d, size=2, store=%r" % (r, store)),
                    lambda r: base_env())
    for r, (text, code) in enumerate(outs):
        assert code == 0 and "rank %d of 2 ok" % r in text, text


def test_torchrun_variables():
    port = server_port()
    outs = run_each(2, lambda r: SNIPPET.format(args=""),
                    lambda r: base_env(RANK=r, WORLD_SIZE=2, LOCAL_RANK=r,
                                       MASTER_ADDR="127.0.0.1", MASTER_PORT=port))
    for r, (text, code) in enumerate(outs):
        assert code == 0 and "rank %d of 2 ok" % r in text, text


def test_installed_package(tmp_path):
    cmake = shutil.which("cmake")
    if cmake is None:
        pytest.skip("cmake is not on PATH: cannot install the build")
    prefix = tmp_path / "prefix"
    proc = subprocess.run([cmake, "--install", str(build_dir()), "--prefix", str(prefix)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    sites = list(prefix.glob("lib/python3*/*-packages"))
    assert len(sites) == 1, list(prefix.rglob("collx"))
    env = base_env()
    env["PYTHONPATH"] = str(sites[0])  # the installed package only, not the build tree
    env.pop("LD_LIBRARY_PATH", None)
    code = ("import collx, sys; assert collx.__file__.startswith(%r), collx.__file__; "
            "import numpy as np; c = collx.init(rank=0, size=1, store='hash://'); "
            "x = np.ones(2); c.allreduce(x); print('installed ok', collx.__version__)"
            % str(sites[0]))
    if any(name == "pytorch backend" and built for name, built, _ in
           __import__("collx").build_features()):
        code += "; import collx.torch; print('torch backend ok')"
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "installed ok" in proc.stdout


def test_collx_run_runs_the_ddp_example():
    pytest.importorskip("torch", reason="python3-torch is not importable by " + sys.executable)
    import collx

    if not any(n == "pytorch backend" and b for n, b, _ in collx.build_features()):
        pytest.skip("this build has no torch backend (COLLX_WITH_TORCH)")
    proc = run_collx(2, ROOT / "examples" / "torch_ddp.py", env=base_env(GLOO_SOCKET_IFNAME="lo"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "max parameter difference" in proc.stdout


def test_elastic_training_goes_on_with_a_replacement_in_the_dead_ranks_place(tmp_path):
    # 3 ranks under collx-run --on-failure replace; the first rank 1 dies at step 20, its
    # replacement joins, receives the newest committed state and trains on: every rank ends
    # at step 60 with the weights of 60 steps, each applied once.
    steps, kill_at, P = 60, 20, 3
    cmd = [collx_run(), "-n", str(P), "--on-failure", "replace", "--max-replacements", "1",
           "--timeout", "90s", "-t", sys.executable, str(WORKERS / "elastic.py"), str(tmp_path),
           str(steps), str(kill_at)]
    done = subprocess.run(cmd, env=base_env(COLLX_PEER_TIMEOUT="1s"), capture_output=True,
                          text=True, timeout=120)
    text = done.stdout + done.stderr
    assert done.returncode == 0, text
    assert "rank 1 (pid" in text and "starting a replacement" in text, text
    # each step s adds sum over ranks of (r + 1 + s), divided by P
    expected = sum((P + 1) / 2 + s for s in range(steps))
    for r in range(P):
        d = json.loads((tmp_path / ("rank%d.json" % r)).read_text())
        assert d["size"] == P and d["step"] == steps and d["same"], d
        assert abs(d["w0"] - expected) < 1e-3 * expected, (d, expected)
        assert d["newcomer"] == (r == 1), d
        if r != 1:
            assert d["reforms"] == [{"failed": [1], "joined": [1], "size": P}], d

