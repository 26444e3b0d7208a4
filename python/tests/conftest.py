"""Shared fixtures of collx's pytest suites: where the build is, and launching ranks as real
processes (through collx-run, or one subprocess per rank over a file store).

ctest runs these with PYTEST_COLLX_BUILD_DIR set and PYTHONPATH=<build>/python; by hand:

    PYTHONPATH=build/python PYTEST_COLLX_BUILD_DIR=build /usr/bin/python3 -m pytest python/tests

The suites are hermetic: the caller's variables that steer collx (COLLX_*, and the launcher
conventions collx.init() falls back to; the names of tests/util/hermetic.cc) are dropped
when this file loads, before anything reads them, and what the suites need is set here or
by each test.
"""
import json
import os
import pathlib
import subprocess
import sys
import uuid

import pytest

HERE = pathlib.Path(__file__).resolve().parent
WORKERS = HERE / "workers"


def _steers_collx(name):
    """True for the variables that steer collx (tests/util/hermetic.cc: steersCollx)."""
    return (name.startswith(("COLLX_", "OMPI_COMM_WORLD_", "SLURM_", "PMIX_"))
            or name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
                        "TORCHELASTIC_RUN_ID", "OMPI_MCA_ess_base_jobid"))


_dropped = sorted(n for n in os.environ if _steers_collx(n))
for _name in _dropped:
    del os.environ[_name]
if any(n.startswith("COLLX_") for n in _dropped):
    sys.stderr.write("collx tests ignore the caller's %s (hermetic)\n"
                     % " ".join(n for n in _dropped if n.startswith("COLLX_")))
os.environ["COLLX_TIMEOUT"] = "60s"  # every wait of the suites, in this process and its ranks


def build_dir():
    """The build tree: PYTEST_COLLX_BUILD_DIR, else the one the imported collx package lives in."""
    if os.environ.get("PYTEST_COLLX_BUILD_DIR"):
        return pathlib.Path(os.environ["PYTEST_COLLX_BUILD_DIR"]).resolve()
    import collx

    return pathlib.Path(collx.__file__).resolve().parents[2]


def collx_run():
    path = build_dir() / "bin" / "collx-run"
    if not path.exists():
        pytest.skip("collx-run is not built at %s (set PYTEST_COLLX_BUILD_DIR)" % path)
    return str(path)


def base_env(**extra):
    env = dict(os.environ)
    package_root = str(pathlib.Path(__import__("collx").__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(
        [package_root, str(HERE)] + [p for p in [env.get("PYTHONPATH")] if p])
    env["OMP_NUM_THREADS"] = "1"
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_collx(nranks, script, *args, timeout=120, env=None):
    """Runs `script` on `nranks` ranks through collx-run; returns the CompletedProcess."""
    cmd = [collx_run(), "-n", str(nranks), "--timeout", "%ds" % timeout, sys.executable,
           str(script)] + [str(a) for a in args]
    return subprocess.run(cmd, env=env or base_env(), capture_output=True, text=True,
                          timeout=timeout + 30)


class Ranks:
    """One subprocess per rank, joined through a file store in a fresh directory (no
    launcher: a rank may die without the others being stopped)."""

    def __init__(self, tmp_path, nranks, script, *args, env=None, timeout=60):
        store = tmp_path / ("store-" + uuid.uuid4().hex[:8])
        store.mkdir()
        self.outputs = [tmp_path / ("rank%d.json" % r) for r in range(nranks)]
        self.timeout = timeout
        self.procs = []
        for r in range(nranks):
            e = base_env(COLLX_RANK=r, COLLX_WORLD_SIZE=nranks, COLLX_STORE="file://%s" % store,
                         COLLX_JOB_ID="pytest-" + store.name, **(env or {}))
            cmd = [sys.executable, str(script), str(self.outputs[r])] + [str(a) for a in args]
            self.procs.append(subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE,
                                               stderr=subprocess.STDOUT, text=True))

    def wait(self, only=None):
        """Waits for every rank (or those in `only`); returns [(returncode, output text,
        result dict or None)] for them."""
        results = []
        for r, (p, out) in enumerate(zip(self.procs, self.outputs)):
            if only is not None and r not in only:
                continue
            try:
                text, _ = p.communicate(timeout=self.timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                text, _ = p.communicate()
                text += "\n(killed by the test after %d s)" % self.timeout
            data = json.loads(out.read_text()) if out.exists() else None
            results.append((p.returncode, text, data))
        return results


@pytest.fixture
def ranks(tmp_path):
    """ranks(n, script, *args, env=None) -> Ranks (already started)."""
    started = []

    def start(nranks, script, *args, **kwargs):
        r = Ranks(tmp_path, nranks, script, *args, **kwargs)
        started.append(r)
        return r

    yield start
    for r in started:
        for p in r.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
