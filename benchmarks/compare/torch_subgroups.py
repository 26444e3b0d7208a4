#!/usr/bin/python3
"""What a torch sub-group costs to make on collx: a split of the default group's context
against a group that joins and connects on its own, and gloo's, in one run.

    PYTHONPATH=build/python /usr/bin/python3 benchmarks/compare/torch_subgroups.py -p 8
        [--rounds 10]

Spawns P ranks (subprocess, tcp:// rendezvous: torch's TCPStore, everything on 127.0.0.1)
with backend collx as the default group. Each round makes, on every rank, the groups of a
2 x P/2 DeviceMesh (dist.new_group for each row and each column, as init_device_mesh does)
and one of the whole world, then runs one all_reduce on each group it is in (a group is
usable once its first call is through); in three kinds, the order turning between rounds:
  split   collx with GroupOptions(split=True): a split of the default group's context (no
          rendezvous, no connection of its own: Context::split)
  apart   collx with GroupOptions(split=False): a context of its own, joined through the
          store and connected afresh
  gloo    backend gloo
and, without torch's new_group around them, collx's own part for a group of all P ranks:
  collx split  ProcessGroupCollx.split of the default group's backend, then all_reduce_
  collx join   a ProcessGroupCollx joined through torch's store, then all_reduce_
Times are the max over ranks of each rank's median over the rounds, per new_group call
(torch's kinds: every rank calls new_group for every group, member or not) or per group
(collx's own); "fds" is the descriptors rank 0 had open more after a round (a split opens
none). Then what a call costs on each: collx.torch.all_reduce on the rows (P/2 ranks each)
made as splits and as groups of their own, 4 B to 1 MiB, the same number of calls on every
rank, the median per call (the max over ranks, the best of 3 rounds). "shm": the share of
the groups made that have a shared-memory group (ProcessGroupCollx.shared_memory). Each
round's groups are destroyed before the next round (not timed).
"""
import argparse
import datetime
import os
import statistics
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_backends import run_ranks  # noqa: E402

KINDS = ["split", "apart", "gloo", "collx split", "collx join"]


def parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-p", type=int, default=0, help="launch P ranks (even, at least 2)")
    ap.add_argument("--rounds", type=int, default=10, help="groups made per kind (default 10)")
    ap.add_argument("--rank", type=int, default=-1, help=argparse.SUPPRESS)
    ap.add_argument("--size", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--init", default="", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.rank < 0 and (a.p < 2 or a.p % 2):
        ap.error("-p must be even and at least 2")
    return a


def worker(a):
    import torch
    import torch.distributed as dist

    import collx.torch

    torch.set_num_threads(1)
    R, P = a.rank, a.size
    dist.init_process_group("collx", init_method=a.init, rank=R, world_size=P,
                            timeout=datetime.timedelta(seconds=120))
    half = P // 2
    rows = [list(range(r * half, (r + 1) * half)) for r in range(2)]
    cols = [[c, half + c] for c in range(half)]

    world = collx.torch.backend_of()
    store = dist.distributed_c10d._get_default_store()
    made = [0]

    def make(kind):
        """Makes the groups of one round; returns (them, how many were made)."""
        made[0] += 1
        if kind.startswith("collx"):
            name = "bench/%d" % made[0]
            if kind == "collx split":
                group = world.split(list(range(P)), name)
            else:
                group = collx.torch.ProcessGroupCollx(dist.PrefixStore(name, store), R, P,
                                                      datetime.timedelta(seconds=120))
            group.all_reduce_(torch.ones(1))
            return [group], 1
        if kind == "gloo":
            options = {"backend": "gloo"}
        elif kind == "split":
            options = {"backend": "collx", "pg_options": collx.torch.GroupOptions(split=True)}
        else:
            options = {"backend": "collx", "pg_options": collx.torch.GroupOptions(split=False)}
        mine = []
        every = rows + cols + [list(range(P))]
        for ranks in every:
            group = dist.new_group(ranks, **options)  # every rank takes part in every one
            if R in ranks:
                mine.append(group)
        for group in mine:
            dist.all_reduce(torch.ones(1), group=group)
        return mine, len(every)

    seconds = {k: [] for k in KINDS}
    opened = {k: [] for k in KINDS}
    shared = {k: [] for k in KINDS}  # the share of a round's groups with a shm group
    for i in range(a.rounds + 1):
        order = KINDS[i % len(KINDS):] + KINDS[:i % len(KINDS)]
        for kind in order:
            dist.barrier()  # (the last round's groups are gone on every rank)
            fds = len(os.listdir("/proc/self/fd"))
            start = time.perf_counter()
            groups, count = make(kind)
            took = time.perf_counter() - start
            if i > 0:  # the first round warms up
                seconds[kind].append(took / count)
                opened[kind].append(len(os.listdir("/proc/self/fd")) - fds)
                if kind != "gloo":
                    backends = [g if kind.startswith("collx") else collx.torch.backend_of(g)
                                for g in groups]
                    shared[kind].append(sum(b.shared_memory for b in backends) / len(backends))
            # Each round's groups go before the next (destroying them is not timed): a
            # split's shared-memory slot comes back.
            if not kind.startswith("collx"):
                for group in groups:
                    dist.destroy_process_group(group)
            del groups
    mine = torch.tensor([statistics.median(seconds[k]) for k in KINDS], dtype=torch.float64)
    dist.all_reduce(mine, op=dist.ReduceOp.MAX)
    if R == 0:
        for k, t in zip(KINDS, mine.tolist()):
            share = "%.2f" % statistics.mean(shared[k]) if shared[k] else "-"
            print("%s,%d,%.6f,%.1f,%s" % (k, P, t, statistics.median(opened[k]), share))
    # What a call costs on a row made each way.
    row = {}
    for kind, split in (("split", True), ("apart", False)):
        for ranks in rows:
            group = dist.new_group(ranks, backend="collx",
                                   pg_options=collx.torch.GroupOptions(split=split))
            if R in ranks:
                row[kind] = group
    for n in (1, 256, 16384, 262144):
        x = torch.ones(n)
        best = {}
        for i in range(3):
            for kind in ("split", "apart") if i % 2 == 0 else ("apart", "split"):
                for _ in range(20):
                    collx.torch.all_reduce(x, group=row[kind])
                times = []
                for _ in range(1000 if n < 100000 else 100):  # the same count on every rank
                    start = time.perf_counter()
                    collx.torch.all_reduce(x, group=row[kind])
                    times.append(time.perf_counter() - start)
                best[kind] = min(best.get(kind, 1.0), statistics.median(times))
        t = torch.tensor([best["split"], best["apart"]], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        if R == 0:
            print("call,%d,%.3f,%.3f" % (4 * n, t[0].item() * 1e6, t[1].item() * 1e6))
    dist.destroy_process_group()


def launch(a):
    with socket.socket() as s:  # a free port for rank 0's TCPStore
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out, rc = run_ranks([sys.executable, os.path.abspath(__file__), "--size", str(a.p),
                         "--init", "tcp://127.0.0.1:%d" % port, "--rounds", str(a.rounds)], a.p)
    if rc:
        sys.exit("torch_subgroups.py: a rank failed (exit %d)" % rc)
    print("P = %d, %d rounds: a group made and its first call" % (a.p, a.rounds))
    print("%-12s %8s %6s %6s" % ("kind", "ms", "fds", "shm"))
    calls = []
    for line in out.splitlines():
        if line.startswith("call,"):
            calls.append(line.split(",")[1:])
            continue
        kind, _, t, fds, share = line.split(",")
        print("%-12s %8.3f %6s %6s" % (kind, float(t) * 1e3, fds, share))
    print("a call on a row of %d ranks (collx.torch.all_reduce, float32; us)" % (a.p // 2))
    print("%10s %8s %8s %12s" % ("bytes", "split", "apart", "split/apart"))
    for nbytes, split, apart in calls:
        print("%10s %8s %8s %12.2f" % (nbytes, split, apart, float(split) / float(apart)))


def main():
    a = parse()
    if a.rank >= 0:
        worker(a)
    else:
        launch(a)


if __name__ == "__main__":
    main()
