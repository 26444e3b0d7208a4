"""The state transfer of collx.elastic against collx's own broadcast, in one run.

Every rank holds a state of ARRAYS float32 arrays, MIB MiB in all; rank 0's is the newest
(committed at a later step, as after a failure where a newcomer has none). Each round times,
after a barrier and until the next, interleaved: (a) a broadcast of every array from rank 0
(what the transfer must move), (b) collx.elastic's transfer (an allreduce of the steps, one
of the holders, then the same broadcasts) and (c) its whole synchronization (the transfer,
then the commit: an in-memory copy of the state on every rank, which a later failure
restores). Rank 0 prints the median time of each and the ratios of their bandwidths to the
broadcast's (the issue's bound for the transfer is at least 0.8), and every rank checks
that it holds rank 0's arrays after each.

    collx-run -n P -- /usr/bin/python3 benchmarks/recovery/state_transfer.py [MIB [ARRAYS [ROUNDS]]]

(defaults 64 MiB in 8 arrays, 7 rounds; PYTHONPATH must reach collx, e.g. build/python)
"""
import statistics
import sys
import time

import numpy as np

import collx
from collx import elastic

mib = int(sys.argv[1]) if len(sys.argv) > 1 else 64
count = int(sys.argv[2]) if len(sys.argv) > 2 else 8
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 7

ctx = collx.init()
n = mib * (1 << 20) // 4 // count
arrays = {"a%d" % i: np.full(n, float(ctx.rank), np.float32) for i in range(count)}
state = elastic.State(**arrays)


def newest():
    """Rank 0's state is the newest: the others' arrays are theirs again, at an older step."""
    for i, a in enumerate(state.arrays.values()):
        a[...] = float(ctx.rank) if ctx.rank != 0 else 1000.0 + i
    state.step = 10 if ctx.rank == 0 else 3
    state.commit()


def broadcast():
    for name in sorted(state.arrays):
        ctx.broadcast(state.arrays[name], root=0)


def timed(fn):
    ctx.barrier()
    start = time.perf_counter()
    fn()
    ctx.barrier()  # (the slowest rank's end: a transfer is done when every rank has it)
    return time.perf_counter() - start


def check(what):
    for name in sorted(state.arrays):
        a = state.arrays[name]
        if not (a[0] == a[-1] == 1000.0 + int(name[1:])):
            sys.exit("rank %d: %s is %g after the %s, not rank 0's %g"
                     % (ctx.rank, name, a[0], what, 1000.0 + int(name[1:])))
    if what != "broadcast" and state.step != 10:
        sys.exit("rank %d: step %d after the %s, not 10" % (ctx.rank, state.step, what))


steps = {"broadcast": broadcast,
         "transfer": lambda: elastic._transfer(ctx, state),
         "transfer and commit": lambda: elastic._synchronize(ctx, state)}
times = {name: [] for name in steps}
newest()
broadcast()  # (warm: buffers touched, connections busy once)
for r in range(rounds):
    for name, fn in steps.items():
        newest()
        times[name].append(timed(fn))
        check(name)

if ctx.rank == 0:
    b = statistics.median(times["broadcast"])
    line = "P=%d, %d MiB in %d arrays over %s, median of %d rounds:" % (
        ctx.size, mib, count, ",".join(sorted(set(ctx.transports) - {"self"})), rounds)
    for name in steps:
        t = statistics.median(times[name])
        line += " %s %.1f ms (%.0f MB/s%s);" % (
            name, t * 1e3, mib * 1.048576 / t,
            "" if name == "broadcast" else ", %.2f of the broadcast's" % (b / t))
    print(line.rstrip(";"))
ctx.close()
