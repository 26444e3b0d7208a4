"""What torch 2.x training calls, on backend collx against backend gloo in the same
processes, at P = 2, 3 and 4 (workers/torch_training.py): coalesced all_gather_into_tensor,
reduce_scatter_tensor and all_reduce (_coalescing_manager), batch_isend_irecv,
monitored_barrier, functional collectives eager and under torch.compile (compiled at P = 2
only: the graph is the same at every P, and compiling it costs each rank seconds), new_group,
DeviceMesh (1-D and 2-D), DTensor, DDP with uneven batches, FSDP2 where the torch runs it on
CPU, and abort() from a watchdog thread. A case this torch cannot run reports itself
skipped, saying why (torch 1.13 has no DeviceMesh; torch 2.6's FSDP2 fails on CPU with gloo
too)."""
import json
import pathlib
import subprocess
import sys
import time

import pytest

from conftest import WORKERS, base_env, collx_run, run_collx
from test_launch import server_port

torch = pytest.importorskip("torch", reason="python3-torch is not importable by "
                            + sys.executable)
import collx  # noqa: E402

if not any(name == "pytorch backend" and built for name, built, _ in collx.build_features()):
    pytest.skip("this build has no torch backend (COLLX_WITH_TORCH)", allow_module_level=True)

SCRIPT = WORKERS / "torch_training.py"
ROOT = pathlib.Path(__file__).resolve().parents[2]
CASES = ["coalesced", "batch_isend_irecv", "monitored_barrier", "functional_eager",
         "functional_compiled", "new_group", "device_mesh", "dtensor", "ddp_uneven", "fsdp2",
         "abort", "fast_all_reduce", "fast_all_reduce_compiled"]


def launch(tmp_path, nranks, timeout=90, cases=(), **env):
    port = server_port()
    procs, outs = [], []
    for r in range(nranks):
        out = tmp_path / ("rank%d.json" % r)
        outs.append(out)
        procs.append(subprocess.Popen(
            [sys.executable, str(SCRIPT), str(out), str(r), str(nranks), str(port)] +
            list(cases),
            env=base_env(GLOO_SOCKET_IFNAME="lo", COLLX_HANG_REPORT_AFTER="0.5s", **env),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    logs = []
    deadline = time.monotonic() + timeout  # one for all ranks, within ctest's for the file
    for p in procs:
        try:
            logs.append(p.communicate(timeout=max(1, deadline - time.monotonic()))[0])
        except subprocess.TimeoutExpired:
            p.kill()
            logs.append(p.communicate()[0] + "\n(killed after %d s)" % timeout)
    results = []
    for r, (p, out) in enumerate(zip(procs, outs)):
        if not out.exists() or p.returncode != 0:
            return "rank %d exited %s (results %s):\n%s" % (r, p.returncode, out.exists(),
                                                            logs[r][-6000:])
        results.append(json.loads(out.read_text()))
    return results


@pytest.fixture(scope="module", params=[2, 3, 4], ids=lambda p: "P%d" % p)
def run(request, tmp_path_factory):
    return launch(tmp_path_factory.mktemp("training_P%d" % request.param), request.param)


@pytest.mark.parametrize("case", CASES)
def test_training_call_matches_gloo(run, case):
    if isinstance(run, str):
        pytest.fail(run)
    outcomes = [r.get(case, "not run (an earlier case failed the group)") for r in run]
    skips = {o for o in outcomes if o.startswith("skip: ")}
    bad = [o for o in outcomes if o != "ok" and not o.startswith("skip: ")]
    assert not bad, "\n".join(bad)
    if skips:
        assert len(skips) == 1 and all(o.startswith("skip: ") for o in outcomes), outcomes
        pytest.skip(skips.pop()[len("skip: "):])


# The sub-group case with every rank on a host of its own (COLLX_HOST_ID per rank, which the
# worker sets): there a new_group with no options is a split over tcp with no shared-memory
# group, where on one host it is a split with a shared-memory group of its own.
@pytest.mark.parametrize("nranks", [2, 4])
def test_sub_groups_across_hosts_are_splits(tmp_path, nranks):
    run = launch(tmp_path, nranks, cases=["new_group"], COLLX_TEST_HOST_PER_RANK="1")
    if isinstance(run, str):
        pytest.fail(run)
    assert [r["new_group"] for r in run] == ["ok"] * nranks, run


# destroy_process_group() lets go of everything collx made: its threads, descriptors and
# shared-memory mappings (this process's: /dev/shm is the machine's, which parallel suites
# change), and torch's store with them (a census before the first group and
# after each later one: a job may form groups again). One thing stays by design after the
# first group: the eventfd that collx's hang-report watcher keeps for its SIGUSR1 handler
# (collx/api/src/diagnostics/hang_report.cc), which a signal may write to at any time.
CENSUS_SCRIPT = """
import gc, json, os, torch, torch.distributed as dist, collx.torch

def census():
    gc.collect()
    maps = open("/proc/self/maps").read()
    fds = sorted(os.readlink("/proc/self/fd/" + f) for f in os.listdir("/proc/self/fd")
                 if os.path.exists("/proc/self/fd/" + f))
    return dict(threads=len(os.listdir("/proc/self/task")), fds=fds,
                memfds=maps.count("memfd:"))

torch.set_num_threads(1)
torch.ones(4).sum()  # torch's own lazily made state, before the first census
censuses = [census()]
during = []
for port in os.environ["PORTS"].split():  # a store of its own each time, as a new job's
    os.environ["MASTER_PORT"] = port
    dist.init_process_group("collx")
    sub = dist.new_group(backend="collx")
    x = torch.ones(1 << 18)  # 1 MiB: past COLLX_TORCH_EAGER_BYTES, the background path
    dist.all_reduce(x)
    dist.all_reduce(x, group=sub)
    dist.all_reduce(torch.ones(4), async_op=True).get_future().wait()
    during.append(census())
    dist.destroy_process_group()
    del sub, x
    censuses.append(census())
print("census", json.dumps(dict(censuses=censuses, during=during)))
"""


@pytest.mark.parametrize("nranks", [2, 3])
def test_destroy_process_group_frees_everything(nranks):
    from test_launch import run_each

    ports = " ".join(str(server_port()) for _ in range(3))
    outs = run_each(nranks, lambda r: CENSUS_SCRIPT, lambda r: base_env(
        MASTER_ADDR="127.0.0.1", PORTS=ports, RANK=r, WORLD_SIZE=nranks), timeout=120)
    for r, (text, code) in enumerate(outs):
        assert code == 0, "rank %d:\n%s" % (r, text)
        line = [x for x in text.splitlines() if x.startswith("census ")]
        assert line, text
        c = json.loads(line[0][len("census "):])
        first, after = c["censuses"][0], c["censuses"][1:]
        for during in c["during"]:  # the census sees what a group holds
            assert during["threads"] > first["threads"], c
            assert len(during["fds"]) > len(first["fds"]) and during["memfds"] > 0, c
        # the watcher's eventfd, once; then nothing more, however many groups came and went
        kept = dict(first, fds=sorted(first["fds"] + ["anon_inode:[eventfd]"]))
        for n, census in enumerate(after):
            assert census == kept, "rank %d after group %d kept: %s" % (r, n, census)


# An unchanged training script (examples/torch_ddp.py: DDP on collx against gloo) at 4 ranks,
# under `torchrun --nproc-per-node 4 train.py` and under collx-run. torchrun's default
# rendezvous makes its agent's TCPStore with libuv whatever USE_LIBUV says, so a torch built
# without libuv (Debian 13's 2.6) starts no job that way with any backend (shown with gloo
# alone); there torchrun takes its rendezvous from the environment instead (PET_* are its
# options, LIBUVLESS_TORCHRUN below: the c10d rendezvous over a file store, the workers'
# store made by rank 0 with USE_LIBUV=0), the command line and the script unchanged.
LIBUVLESS_TORCHRUN = {"PET_RDZV_BACKEND": "c10d", "PET_RDZV_CONF": "store_type=file",
                      "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1", "USE_LIBUV": "0",
                      "PET_LOCAL_ADDR": "127.0.0.1"}


def test_torchrun_runs_an_unchanged_script(tmp_path):
    import shutil

    torchrun = shutil.which("torchrun") or str(pathlib.Path(sys.executable).parent / "torchrun")
    if not pathlib.Path(torchrun).exists():
        pytest.skip("no torchrun beside %s" % sys.executable)
    if torch.__version__.startswith("1."):
        pytest.skip("Debian's torchrun 1.13 fails under Python 3.11 before it starts a rank")

    def torchrun_job(script, **env):
        return subprocess.run([torchrun, "--nproc-per-node", "4", str(script)],
                              env=base_env(GLOO_SOCKET_IFNAME="lo", **env), capture_output=True,
                              text=True, timeout=240)

    ddp = ROOT / "examples" / "torch_ddp.py"
    proc = torchrun_job(ddp, PET_MASTER_ADDR="127.0.0.1", PET_MASTER_PORT=str(server_port()),
                        USE_LIBUV="0")
    if proc.returncode != 0 and "without libuv support" in proc.stderr:
        plain = torchrun_job(pathlib.Path(__file__).parent / "workers" / "gloo_only.py",
                             PET_MASTER_ADDR="127.0.0.1", PET_MASTER_PORT=str(server_port()),
                             USE_LIBUV="0")
        assert plain.returncode != 0 and "without libuv support" in plain.stderr, plain.stderr
        proc = torchrun_job(ddp, PET_RDZV_ENDPOINT=str(tmp_path / "rendezvous"),
                            **LIBUVLESS_TORCHRUN)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "4 ranks: loss" in proc.stdout and "max parameter difference" in proc.stdout, \
        proc.stdout + proc.stderr


def test_collx_run_runs_an_unchanged_script():
    proc = run_collx(4, ROOT / "examples" / "torch_ddp.py", timeout=200,
                     env=base_env(GLOO_SOCKET_IFNAME="lo"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "4 ranks: loss" in proc.stdout, proc.stdout + proc.stderr


def test_ddp_goes_on_with_a_replacement_in_place(tmp_path):
    # DDP on 3 ranks under collx-run --on-failure replace; the first rank 1 dies at step 10,
    # the group re-forms in place with its replacement (two sub-groups too), and every rank
    # ends at step 30 with the same parameters.
    steps, kill_at, P = 30, 10, 3
    cmd = [collx_run(), "-n", str(P),
           "--on-failure", "replace", "--max-replacements", "1", "--timeout", "150s", "-t",
           sys.executable, str(WORKERS / "torch_reform.py"), str(tmp_path), str(steps),
           str(kill_at)]
    done = subprocess.run(cmd, env=base_env(COLLX_PEER_TIMEOUT="1s"), capture_output=True,
                          text=True, timeout=200)
    text = done.stdout + done.stderr
    assert done.returncode == 0, text
    assert "starting a replacement" in text, text
    results = [json.loads((tmp_path / ("rank%d.json" % r)).read_text()) for r in range(P)]
    for d in results:
        assert d["step"] == steps and d["same_as_rank0"], (d, text)
        assert d["newcomer"] == (d["rank"] == 1), d
        if d["rank"] != 1:
            assert [(x["failed"], x["joined"]) for x in d["reforms"]] == [([1], [1])], d
    assert len({d["checksum"] for d in results}) == 1, results
    # The sub-groups re-formed with the default group: {1, 2} (rank 1's place taken by the
    # newcomer) and {0, 2} sum rank + 1 over their members.
    expected = {0: {"0,2": 4.0}, 1: {"1,2": 5.0}, 2: {"1,2": 5.0, "0,2": 4.0}}
    for d in results:
        assert d["subgroups"] == expected[d["rank"]], (d, text)



def test_the_ddp_example_loses_ranks_and_ends_with_equal_parameters():
    # examples/ddp_elastic.py as the README runs it, shorter: 3 ranks for 10 s, rank r > 0
    # killing itself r * 4 s into its life, each replaced.
    cmd = [collx_run(), "-n", "3", "--on-failure", "replace", "--max-replacements", "20",
           "--timeout", "150s", "-t", sys.executable, str(ROOT / "examples" / "ddp_elastic.py"),
           "--seconds", "10", "--kill-every", "4"]
    done = subprocess.run(cmd, env=base_env(), capture_output=True, text=True, timeout=200)
    text = done.stdout + done.stderr
    assert done.returncode == 0, text
    assert "starting a replacement" in text, text
    assert "re-formed: rank(s) [1] failed, newcomer(s) at [1]" in text, text
    assert "every rank's parameters and momentum equal" in text, text
    assert "Exception raised from" not in text, text  # (a clean goodbye: rank 0's store last)
