"""collx from numpy: a distributed mean and variance, an async allgather, bfloat16.

    build/bin/collx-run -n 4 /usr/bin/python3 examples/numpy_collectives.py

(with PYTHONPATH=build/python, or an installed collx). Every rank holds a shard of a data
set; allreduce combines the shards' statistics, allgather collects one row per rank while
the rank computes something else.
"""
import numpy as np

import collx

ctx = collx.init()  # rank, size and store from collx-run's environment
rank, size = ctx.rank, ctx.size

rng = np.random.default_rng(seed=rank)
shard = rng.normal(loc=rank, scale=1.0, size=(10_000, 8)).astype(np.float32)

# Sum, sum of squares and count over every rank's shard: one allreduce of 17 float64.
stats = np.concatenate([shard.sum(0), (shard.astype(np.float64) ** 2).sum(0), [len(shard)]])
ctx.allreduce(stats)  # in place
n = stats[-1]
mean = stats[:8] / n
var = stats[8:16] / n - mean**2

# Each rank's column maxima, gathered in the background while this rank keeps working.
work = ctx.allgather(shard.max(0), async_op=True)
local_norm = float(np.linalg.norm(shard))
maxima = work.result()  # shape (size, 8)

# bfloat16 without torch: uint16 arrays tagged as bfloat16 (the high half of a float32).
as_bf16 = (np.full(4, rank + 1, np.float32).view(np.uint32) >> 16).astype(np.uint16)
ctx.allreduce(as_bf16, op="max", dtype=collx.bfloat16)
bf16_max = (as_bf16.astype(np.uint32) << 16).view(np.float32)

# Everyone agrees on the result: the root checks that every rank computed the same mean.
means = ctx.gather(mean, root=0)
if rank == 0:
    assert np.allclose(means, mean), "ranks disagree"
    assert np.allclose(mean, (size - 1) / 2, atol=0.05), mean
    assert maxima.shape == (size, 8)
    assert (bf16_max == size).all(), bf16_max
    print("collx %s: %d ranks, %d rows: mean %.3f, variance %.3f, max %.2f"
          % (collx.__version__, size, int(n), mean.mean(), var.mean(), maxima.max()))
ctx.close()
