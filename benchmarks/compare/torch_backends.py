#!/usr/bin/python3
"""torch.distributed all_reduce with backend "collx" against backend "gloo", in one run.

    PYTHONPATH=build/python /usr/bin/python3 benchmarks/compare/torch_backends.py -p 4
        [--sizes 4,64,...] [--dtype bfloat16] [--paths collx,gloo,fast,fastpy,own,pyloop]
        [--min-time 0.3] [--repeat 1] [--csv out.csv]

Spawns P ranks (subprocess, file:// rendezvous, everything on 127.0.0.1). Each rank
creates the default group with backend collx and a second group over the same ranks with
backend gloo; for every size every path runs in the same processes, one after the other
(the order turns between sizes), so that the machine's load is the same for all. The paths:
  collx  dist.all_reduce on the collx group (blocking, as a training loop calls it)
  gloo   dist.all_reduce on the gloo group
  fast   collx.torch.all_reduce: collx's small-call path, without torch's dispatch, Work
         and future (the path of CPU tensor-parallel inference's many small calls)
  fastpy collx.torch._all_reduce_py: the same path through its Python wrapper (what
         collx.torch.all_reduce was before it became a C function), for comparison
  own    collx's own blocking allreduce on the same group's context, called from C++ in a
         loop (no Python, no torch): the floor the torch paths are measured against
  pyloop the same call timed inside C++ as in own, but one call per iteration of a Python
         loop: what returning to Python between calls costs the call itself (where ranks
         outnumber cores, the peers that share a core run their Python in its time)
Method as ../shared/peers/torch_bench.py: sum, in place, one verified call, warmup, then a
time-bounded loop; the time is the max over ranks of each rank's median. With --repeat R
every size is measured R times per path (the rounds interleaved) and each keeps its best
round. Prints one table: the time of each path, gloo/collx (above 1: collx is faster) and
fast - own, the cost of torch around collx's call (the median over rounds of each round's
difference). On a terminal, rank 0 shows its progress on stderr (one line,
rewritten); in a pipe or a log, nothing.
"""
import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

DEFAULT_SIZES = [4, 64, 1024, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20,
                 64 << 20]


def parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-p", type=int, default=0, help="launch P ranks")
    ap.add_argument("--rank", type=int, default=-1)
    ap.add_argument("--size", type=int, default=-1)
    ap.add_argument("--init", default="")
    ap.add_argument("--sizes", default="")
    ap.add_argument("--min-time", type=float, default=0.3)
    ap.add_argument("--min-iters", type=int, default=5)
    ap.add_argument("--max-iters", type=int, default=10000)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--csv", default="")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--paths", default="collx,gloo",
                    help="of collx, gloo, fast, fastpy, own, pyloop (default collx,gloo)")
    return ap.parse_args()


def human(seconds):
    s = int(round(seconds))
    return "%.1fs" % seconds if seconds < 60 else "%dm%02ds" % (s // 60, s % 60)


class Progress:
    """One line on stderr, rewritten before each step: where the sweep is, how long it took
    and about how long the rest will. Nothing unless stderr is a terminal."""

    def __init__(self, enabled, total):
        self.enabled = enabled and sys.stderr.isatty()
        self.total = total
        self.done = 0
        self.start = time.monotonic()

    def step(self, what):
        if self.enabled:
            elapsed = time.monotonic() - self.start
            left = "~" + human(elapsed / self.done * (self.total - self.done)) \
                if self.done else "?"
            sys.stderr.write("\rtorch_backends.py: %s, elapsed %s, remaining %s\033[K" %
                             (what, human(elapsed), left))
            sys.stderr.flush()
        self.done += 1

    def clear(self):
        if self.enabled:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


def busy_seconds():
    """CPU seconds the whole machine has spent busy (all CPUs, from /proc/stat), or None."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle, iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def report_load(busy0, wall0):
    """Says on stderr how much CPU other processes took since busy0 (busy_seconds()) and
    wall0 (time.monotonic()): their load slows every path (on a 2-core machine a build
    alone turns 1 MiB from about 140 us into 600)."""
    busy1, wall = busy_seconds(), time.monotonic() - wall0
    if busy0 is None or busy1 is None or wall <= 0:
        return
    ours = resource.getrusage(resource.RUSAGE_CHILDREN)
    others = max(0.0, busy1 - busy0 - ours.ru_utime - ours.ru_stime) / wall
    sys.stderr.write("%s: other processes kept %.2f of %d CPUs busy on average during the "
                     "run%s\n" % (os.path.basename(sys.argv[0]), others, os.cpu_count() or 0,
                                   " (not a quiet machine: figures are inflated)"
                                   if others > 0.1 else ""))


def run_ranks(command, p):
    """Runs `command` + ["--rank", r] for r < p (loopback only, one thread each); returns
    rank 0's standard output and the ranks' exit codes or'ed, and reports the load of other
    processes meanwhile."""
    env = dict(os.environ)
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    env.setdefault("OMP_NUM_THREADS", "1")
    env.pop("MASTER_ADDR", None)
    busy0, wall0 = busy_seconds(), time.monotonic()
    procs = [subprocess.Popen(command + ["--rank", str(r)], env=env,
                              stdout=subprocess.PIPE if r == 0 else None, text=True)
             for r in range(p)]
    out, _ = procs[0].communicate()
    rc = 0
    for proc in procs:
        rc |= proc.wait()
    report_load(busy0, wall0)
    return out, rc


def worker(a):
    import torch
    import torch.distributed as dist
    import collx.torch  # noqa: F401  (registers the backend)

    torch.set_num_threads(1)
    P, r = a.size, a.rank
    dist.init_process_group("collx", init_method=a.init, rank=r, world_size=P)
    groups = {"collx": dist.group.WORLD, "gloo": dist.new_group(backend="gloo")}
    sizes = [int(x, 0) for x in a.sizes.split(",")] if a.sizes else DEFAULT_SIZES

    def amax(v):
        t = torch.tensor([v], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=groups["gloo"])
        return t.item()

    def iterations(est):  # calls that fill --min-time at `est` seconds a call, bounded
        return max(a.min_iters, min(a.max_iters, int(-(-a.min_time // max(est, 1e-9)))))

    def time_op(op):
        t0 = time.perf_counter()
        op()
        est = amax(time.perf_counter() - t0)
        w = max(1, min(50, int(-(-0.02 // max(est, 1e-9)))))
        t0 = time.perf_counter()
        for _ in range(w):
            op()
        est = amax((time.perf_counter() - t0) / w)
        iters = iterations(est)
        ts = []
        pc = time.perf_counter
        for _ in range(iters):
            t1 = pc()
            op()
            ts.append(pc() - t1)
        return amax(statistics.median(ts))

    import collx

    backend = collx.torch.backend_of()
    paths = a.paths.split(",")
    dtype = getattr(torch, a.dtype)
    calls = {
        "collx": lambda x: dist.all_reduce(x, group=groups["collx"]),
        "gloo": lambda x: dist.all_reduce(x, group=groups["gloo"]),
        "fast": collx.torch.all_reduce,
        "fastpy": collx.torch._all_reduce_py,
        "own": collx.torch.all_reduce,  # (verified through the fast path, timed in C++)
        "pyloop": collx.torch.all_reduce,  # (likewise)
    }

    def time_own(x):
        backend._time_own_all_reduce(x, 20)  # warmup
        est = amax(statistics.median(backend._time_own_all_reduce(x, 5)))
        iters = iterations(est)
        return amax(statistics.median(backend._time_own_all_reduce(x, iters)))

    def time_pyloop(x):
        own = backend._time_own_all_reduce
        for _ in range(20):  # warmup
            own(x, 1)
        est = amax(statistics.median([own(x, 1)[0] for _ in range(5)]))
        iters = iterations(est)
        return amax(statistics.median([own(x, 1)[0] for _ in range(iters)]))

    rounds = {}  # (path, bytes): its time in each round
    progress = Progress(r == 0, a.repeat * len(sizes))
    for rep in range(a.repeat):
        for i, b in enumerate(sizes):
            progress.step("size %d of %d (round %d of %d)" % (i + 1, len(sizes), rep + 1,
                                                               a.repeat))
            esize = torch.tensor([], dtype=dtype).element_size()
            n = max(1, b // esize)
            idx = torch.arange(n, dtype=torch.int64)
            pat = ((idx % 13) + 1).to(dtype)
            turn = (i + rep) % len(paths)
            for name in paths[turn:] + paths[:turn]:
                call = calls[name]
                x = pat * (r + 1)
                call(x)
                if not torch.equal(x, pat * (P * (P + 1) // 2)):
                    sys.stderr.write("ERROR: %s all_reduce of %d bytes: wrong result\n" %
                                     (name, n * esize))
                    sys.exit(1)
                x.zero_()
                timer = {"own": time_own, "pyloop": time_pyloop}.get(name)
                t = timer(x) if timer else time_op(lambda: call(x))
                rounds.setdefault((name, n * esize), []).append(t)
    progress.clear()
    if r == 0:
        for (name, nbytes), ts in sorted(rounds.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            sys.stdout.write("%s,%d,%d,%s\n" % (name, P, nbytes,
                                                 ",".join("%.3f" % (t * 1e6) for t in ts)))
        sys.stdout.flush()
    dist.barrier(group=groups["gloo"])
    dist.destroy_process_group()


def launch(a):
    tmp = tempfile.mkdtemp(prefix="collx_torch_bench_")
    init = "file://" + os.path.join(tmp, "rdzv")
    base = [sys.executable, os.path.abspath(__file__), "--size", str(a.p), "--init", init,
            "--min-time", str(a.min_time), "--min-iters", str(a.min_iters),
            "--max-iters", str(a.max_iters), "--repeat", str(a.repeat)]
    if a.sizes:
        base += ["--sizes", a.sizes]
    base += ["--dtype", a.dtype, "--paths", a.paths]
    out, rc = run_ranks(base, a.p)
    try:
        for f in os.listdir(tmp):
            os.unlink(os.path.join(tmp, f))
        os.rmdir(tmp)
    except OSError:
        pass
    rows = {}  # bytes: {path: its best round}
    per_round = {}  # bytes: {path: its time in each round}
    for line in out.splitlines():
        name, P, nbytes, *ts = line.split(",")
        per_round.setdefault(int(nbytes), {})[name] = [float(t) for t in ts]
        rows.setdefault(int(nbytes), {})[name] = min(float(t) for t in ts)
    if a.csv:
        with open(a.csv, "a") as f:
            for nbytes, r in sorted(rows.items()):
                for name, t in sorted(r.items()):
                    f.write("%s,%d,%d,%.3f\n" % (name, a.p, nbytes, t))
    paths = a.paths.split(",")
    extra = []
    if "collx" in paths and "gloo" in paths:
        extra.append(("gloo / collx", lambda r: "%.2f" % (r["gloo"] / r["collx"])))
    # A path's cost over another (over collx's own call; fast over pyloop, the same call from
    # the same Python loop): the median over rounds of the difference within each round (the
    # two ran one after the other, on the same load), not the difference of two best rounds,
    # which may come from different moments of a machine whose speed drifts.
    def over(p, q):
        return lambda r: "%.2f" % statistics.median(
            x - y for x, y in zip(per_round[r["bytes"]][p], per_round[r["bytes"]][q]))

    for p, q in (("fast", "own"), ("fastpy", "own"), ("pyloop", "own"), ("fast", "pyloop")):
        if p in paths and q in paths:
            extra.append(("%s - %s (us)" % (p, q), over(p, q)))
    if "fast" in paths and "gloo" in paths:
        extra.append(("gloo / fast", lambda r: "%.1f" % (r["gloo"] / r["fast"])))
    head = ["P", "bytes (%s)" % a.dtype] + ["%s (us)" % p for p in paths] + [e[0] for e in extra]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for nbytes, r in sorted(rows.items()):
        r = dict(r, bytes=nbytes)
        cells = [str(a.p), str(nbytes)] + ["%.2f" % r[p] if p in r else "-" for p in paths]
        cells += [f(r) if all(p in r for p in paths) else "-" for _, f in extra]
        print("| " + " | ".join(cells) + " |")
    sys.stdout.flush()
    return rc


def main():
    a = parse()
    if a.p > 0:
        return launch(a)
    if a.rank < 0 or a.size <= 0 or not a.init:
        sys.stderr.write("usage: torch_backends.py -p P [options]\n")
        return 2
    worker(a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
