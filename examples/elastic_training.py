"""Data-parallel training that loses ranks and goes on, without restarting anyone else.

    PYTHONPATH=build/python build/bin/collx-run -n 4 --on-failure replace --max-replacements 100 \\
        -t -- /usr/bin/python3 examples/elastic_training.py --seconds 120 --kill-every 30

Every rank trains the same small torch model on its own batches; the gradients are averaged
with collx (one allreduce of all of them per step) and the state (parameters, step) is
committed after every step (collx.elastic). With --kill-every S, a rank other than 0 kills
itself (SIGKILL) S seconds into its life, rank r after r * S seconds: collx-run starts a
replacement in its place, the survivors re-form with it (Context.reform), the newest
committed state is broadcast to it, and training goes on at the step it had reached. Rank 0
prints the timeline; at the end every rank checks that all ranks hold the same parameters.
"""
import argparse
import os
import signal
import time

import numpy as np
import torch

import collx
import collx.elastic

parser = argparse.ArgumentParser()
parser.add_argument("--seconds", type=float, default=60, help="how long to train")
parser.add_argument("--kill-every", type=float, default=0,
                    help="rank r > 0 kills itself r * S seconds into its life (0: never)")
args = parser.parse_args()
born = time.monotonic()

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
params = [p.data for p in model.parameters()]
state = collx.elastic.State(**{"p%d" % i: p for i, p in enumerate(params)})
state.started = time.time()  # (not committed: each process's own)
w_true = torch.linspace(-1, 1, 16)
opt = torch.optim.SGD(model.parameters(), lr=0.05)


def say(ctx, text):
    if ctx.rank == 0:
        print("t=%6.2fs step %6d size %d: %s" % (time.monotonic() - born, state.step, ctx.size,
                                                  text), flush=True)


def train(ctx, state):
    # The steps to run: agreed by every rank (the time is up when rank 0 says so).
    flat = torch.zeros(sum(p.numel() for p in params) + 1)
    last_report = time.monotonic()
    while True:
        if args.kill_every > 0 and ctx.rank > 0 and \
                time.monotonic() - born > args.kill_every * ctx.rank:
            os.kill(os.getpid(), signal.SIGKILL)
        gen = torch.Generator().manual_seed(1000003 * state.step + ctx.rank)
        x = torch.randn(32, 16, generator=gen)
        y = (x @ w_true).unsqueeze(1)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        at = 0
        for p in model.parameters():
            flat[at:at + p.numel()] = p.grad.reshape(-1)
            at += p.numel()
        flat[-1] = 1.0 if (ctx.rank == 0 and time.monotonic() - born > args.seconds) else 0.0
        ctx.allreduce(flat)  # sums; the last element says whether rank 0's time is up
        at = 0
        for p in model.parameters():
            p.grad.copy_(flat[at:at + p.numel()].reshape(p.shape) / ctx.size)
            at += p.numel()
        opt.step()
        state.step += 1
        state.commit()
        stepped[0] = time.monotonic()
        if time.monotonic() - last_report > 5:
            say(ctx, "loss %.5f" % loss.item())
            last_report = time.monotonic()
        if flat[-1] > 0:
            return loss.item()


stepped = [time.monotonic()]  # when the last step ended


def reformed(ctx, failed, joined):
    # (The time from the last step includes the replacement's start: Python and torch.)
    say(ctx, "re-formed: rank(s) %s failed, newcomer(s) at %s, %.2f s after the last step"
        % (failed, joined, time.monotonic() - stepped[0]))


start = time.monotonic()
loss, ctx = collx.elastic.run(train, state, replacement_wait=30, on_reform=reformed)
# Every rank holds the same parameters: compare each with rank 0's.
mine = torch.cat([p.reshape(-1) for p in params])
theirs = mine.clone()
ctx.broadcast(theirs, root=0)
same = bool(torch.equal(mine, theirs))
flags = np.array([1 if same else 0], np.int64)
ctx.allreduce(flags, op=collx.ReduceOp.MIN)
say(ctx, "done: loss %.5f, every rank's parameters %s" %
    (loss, "equal" if flags[0] == 1 else "DIFFER"))
ctx.close()
raise SystemExit(0 if flags[0] == 1 else 1)
