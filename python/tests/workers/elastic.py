"""collx.elastic under collx-run --on-failure replace: a toy data-parallel loop whose every
step depends on the step before and on its number (a step lost or applied twice changes the
result). The original rank 1 kills itself at step KILL_AT; its replacement joins, receives
the state and trains on. Each rank writes its result to OUT_DIR/rank<R>.json."""
import json
import os
import signal
import sys

import numpy as np

import collx
import collx.elastic

out_dir, steps, kill_at = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
w = np.zeros(4096, np.float32)
state = collx.elastic.State(weights=w)
reforms = []


def train(ctx, state):
    while state.step < steps:
        s = state.step
        if (ctx.rank == 1 and s == kill_at and os.environ.get("COLLX_JOIN") != "1"):
            os.kill(os.getpid(), signal.SIGKILL)
        grad = np.full(w.size, float(ctx.rank + 1 + s), np.float32)
        ctx.allreduce(grad)
        state.weights += grad / ctx.size
        state.step += 1
        state.commit()
    return state.step


def told(ctx, failed, joined):
    reforms.append({"failed": failed, "joined": joined, "size": ctx.size})


step, ctx = collx.elastic.run(train, state, replacement_wait=20, on_reform=told)
result = {"rank": ctx.rank, "size": ctx.size, "step": step, "w0": float(w[0]),
          "same": bool((w == w[0]).all()), "reforms": reforms,
          "newcomer": os.environ.get("COLLX_JOIN") == "1"}
with open(os.path.join(out_dir, "rank%d.json" % ctx.rank), "w") as f:
    json.dump(result, f)
ctx.close()
