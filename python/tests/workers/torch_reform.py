"""DDP on backend collx under collx-run --on-failure replace: the first rank 1 kills itself
at step KILL_AT; the survivors re-form the default group in place (collx.torch.reform), the
replacement's init_process_group("collx") joins, the newest committed state (parameters,
optimizer's momentum, step) is broadcast from the lowest rank that has it, and training goes
on with the same model (each rank makes its DDP wrapper again, as the newcomer does). Two
sub-groups go on too. Each rank writes its final parameters' checksum, what it saw and its
sub-groups' sums to OUT_DIR/rank<R>.json."""
import json
import os
import signal
import sys

import torch
import torch.distributed as dist

import collx.torch  # noqa: F401  (registers the backend "collx")

out_dir, steps, kill_at = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
dist.init_process_group("collx")
rank, size = dist.get_rank(), dist.get_world_size()
newcomer = os.environ.get("COLLX_JOIN") == "1"
# Two sub-groups (splits of the default group's context), made by every rank in the same
# order, the newcomer's script too: one with rank 1, which dies, one without it. reform()
# splits them again, and at the end each member all-reduces rank + 1 in each.
subgroups = {ranks: dist.new_group(list(ranks)) for ranks in ((1, 2), (0, 2))}
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
# DDP syncs at construction (its parameters' shapes, then rank 0's values): after a re-form
# every rank makes its wrapper again, the survivors and the newcomer alike, over the same
# model and the same (re-formed) default group.
net = torch.nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
w_true = torch.linspace(-1, 1, 8)


def tensors():
    out = [p.data for p in model.parameters()]
    for p in model.parameters():
        buf = opt.state.get(p, {}).get("momentum_buffer")
        out.append(buf if buf is not None else torch.zeros_like(p))
    return out


def ensure_momentum():
    for p in model.parameters():
        if opt.state.get(p, {}).get("momentum_buffer") is None:
            opt.state[p]["momentum_buffer"] = torch.zeros_like(p)


ensure_momentum()
step = 0
committed = (-1 if newcomer else 0, [t.clone() for t in tensors()])


def commit():
    global committed
    committed = (step, [t.clone() for t in tensors()])


def synchronize():
    """Every rank takes the newest commit any rank has."""
    global step
    newest = torch.tensor([committed[0]], dtype=torch.int64)
    dist.all_reduce(newest, op=dist.ReduceOp.MAX)
    holder = torch.tensor([rank if committed[0] == newest.item() else size], dtype=torch.int64)
    dist.all_reduce(holder, op=dist.ReduceOp.MIN)
    for t, saved in zip(tensors(), committed[1]):
        t.copy_(saved)
    for t in tensors():
        dist.broadcast(t, src=holder.item())
    step = newest.item()
    commit()


reforms = []
if newcomer:
    synchronize()
while step < steps:
    try:
        if rank == 1 and step == kill_at and not newcomer:
            os.kill(os.getpid(), signal.SIGKILL)
        gen = torch.Generator().manual_seed(1000 * step + rank)
        x = torch.randn(16, 8, generator=gen)
        y = (x @ w_true).unsqueeze(1)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(net(x), y)
        loss.backward()  # DDP all-reduces the gradients here
        opt.step()
        step += 1
        commit()
    except Exception as e:  # noqa: BLE001 - a collx error through torch: re-form and go on
        failed, joined = collx.torch.reform(timeout=60, replacement_wait=30)
        reforms.append({"failed": failed, "joined": joined, "error": type(e).__name__})
        net = torch.nn.parallel.DistributedDataParallel(model)
        synchronize()
checksum = float(sum(p.detach().double().sum() for p in model.parameters()))
flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
theirs = flat.clone()
dist.broadcast(theirs, src=0)
sums = {}
for ranks, group in subgroups.items():
    if rank in ranks:
        t = torch.tensor([rank + 1.0])
        dist.all_reduce(t, group=group)
        sums["%d,%d" % ranks] = t.item()
with open(os.path.join(out_dir, "rank%d.json" % rank), "w") as f:
    json.dump({"rank": rank, "step": step, "checksum": checksum, "newcomer": newcomer,
               "same_as_rank0": bool(torch.equal(flat, theirs)), "reforms": reforms,
               "subgroups": sums}, f)
dist.destroy_process_group()
