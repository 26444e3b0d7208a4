"""DistributedDataParallel that loses ranks and goes on: torch's DDP on the collx backend,
where the process group re-forms in place after a failure instead of the job restarting.

    PYTHONPATH=build/python build/bin/collx-run -n 4 --on-failure replace \\
        --max-replacements 100 -t -- python3 examples/ddp_elastic.py --seconds 120 --kill-every 30

torch 1.13 or 2.x. Every rank trains the same small model on its own batches; DDP
all-reduces the gradients with backend collx; after every step each rank keeps a copy of
the state (parameters, the optimizer's momentum, the step) in memory. With --kill-every S, rank r > 0
kills itself (SIGKILL) r * S seconds into its life: collx-run starts a replacement in its
place (COLLX_JOIN=1: its init_process_group("collx") joins the running job), every live
rank re-forms the default group in place (collx.torch.reform: the same ProcessGroup, ranks
and size), makes its DDP wrapper again over the same model (DDP syncs at construction, as
the newcomer's does), the ranks agree on the newest step any of them kept and the lowest
rank that has it broadcasts that state, and training goes on. Nobody else restarts (torchrun's
elastic agent would restart every process and go back to the last checkpoint). Rank 0 prints
the timeline; at the end every rank checks that all hold the same parameters and momentum.
"""
import argparse
import gc
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

import collx
import collx.torch  # noqa: F401  (registers the backend "collx")

parser = argparse.ArgumentParser()
parser.add_argument("--seconds", type=float, default=60, help="how long to train")
parser.add_argument("--kill-every", type=float, default=0,
                    help="rank r > 0 kills itself r * S seconds into its life (0: never)")
args = parser.parse_args()
born = time.monotonic()
dist.init_process_group("collx")  # (a replacement's joins the running job)
rank, size = dist.get_rank(), dist.get_world_size()
newcomer = os.environ.get("COLLX_JOIN") == "1"
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
net = torch.nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(net.parameters(), lr=0.02, momentum=0.9)
for p in model.parameters():
    opt.state[p]["momentum_buffer"] = torch.zeros_like(p)
w_true = torch.linspace(-1, 1, 16)
t0 = torch.tensor([time.time()], dtype=torch.float64)  # the job's start: rank 0's clock


def state():
    return [p.data for p in model.parameters()] + \
           [opt.state[p]["momentum_buffer"] for p in model.parameters()]


step = 0
kept = (-1 if newcomer else 0, [t.clone() for t in state()])


def say(text):
    if rank == 0:
        print("t=%6.2fs step %6d: %s" % (time.time() - t0.item(), step, text), flush=True)


def synchronize():
    """Every rank takes the newest state any rank kept, from the lowest rank that has it."""
    global step, kept
    newest = torch.tensor([kept[0]], dtype=torch.int64)
    dist.all_reduce(newest, op=dist.ReduceOp.MAX)
    holder = torch.tensor([rank if kept[0] == newest.item() else size], dtype=torch.int64)
    dist.all_reduce(holder, op=dist.ReduceOp.MIN)
    for t, saved in zip(state(), kept[1]):
        t.copy_(saved)
    for t in state():
        dist.broadcast(t, src=holder.item())
    dist.broadcast(t0, src=holder.item())
    step = newest.item()
    kept = (step, [t.clone() for t in state()])


if newcomer:
    synchronize()
else:
    dist.broadcast(t0, src=0)
last_step_at = time.monotonic()
last_report = time.monotonic()
while True:
    try:
        if args.kill_every > 0 and rank > 0 and time.monotonic() - born > args.kill_every * rank:
            os.kill(os.getpid(), signal.SIGKILL)
        gen = torch.Generator().manual_seed(1000003 * step + rank)  # this rank's batch
        x = torch.randn(32, 16, generator=gen)
        y = (x @ w_true).unsqueeze(1)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(net(x), y)
        loss.backward()  # DDP all-reduces the gradients here
        opt.step()
        # Whether the time is up: rank 0's word, in one allreduce every rank makes.
        done = torch.tensor([float(rank == 0 and time.time() - t0.item() >= args.seconds)])
        dist.all_reduce(done)
        step += 1
        kept = (step, [t.clone() for t in state()])
        last_step_at = time.monotonic()
        if time.monotonic() - last_report >= 10:
            last_report = time.monotonic()
            say("loss %.3g" % loss.item())
        if done.item() > 0:
            break
    except (collx.Error, RuntimeError):  # (through DDP, torch's DistBackendError)
        # A rank died (or this one's group was revoked): re-form in place, with the
        # replacement collx-run started, then go on from the newest state anyone kept.
        failed, joined = collx.torch.reform(timeout=60, replacement_wait=30)
        net = torch.nn.parallel.DistributedDataParallel(model)
        synchronize()
        say("re-formed: rank(s) %s failed, newcomer(s) at %s, %.2f s after the last step"
            % (failed, joined, time.monotonic() - last_step_at))

flat = torch.cat([t.reshape(-1) for t in state()])
theirs = flat.clone()
dist.broadcast(theirs, src=0)
same = torch.tensor([float(torch.equal(flat, theirs))])
dist.all_reduce(same, op=dist.ReduceOp.MIN)
say("done: loss %.3g, every rank's parameters and momentum %s"
    % (loss.item(), "equal" if same.item() == 1 else "NOT EQUAL"))
# Rank 0 holds torch's store (MASTER_ADDR's TCPStore): it leaves last, once every other rank
# has let go of its group (whose goodbye goes through that store). Each DDP wrapper made
# holds the group, and so do the hooks it put on the model's parameters, which the last
# loss's graph holds too.
store = dist.distributed_c10d._get_default_store()
del net, model, opt, kept, loss
gc.collect()
code = 0 if same.item() == 1 else 1
if rank != 0:
    dist.destroy_process_group()
    gc.collect()
    store.set("ddp_elastic/left/%d" % rank, "1")
    # (torch 2.6 keeps a replacement's group alive until the interpreter exits, with no
    # Python object referring to it: its goodbye would then find rank 0's store gone and
    # torch would print the failed request's C++ trace. Leave without it.)
    sys.stdout.flush()
    os._exit(code)
store.wait(["ddp_elastic/left/%d" % r for r in range(1, size)])
dist.destroy_process_group()
sys.exit(code)
