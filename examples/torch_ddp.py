"""DistributedDataParallel on the collx backend, checked against the gloo backend.

    build/bin/collx-run -n 2 -- /usr/bin/python3 examples/torch_ddp.py
    RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 python3 examples/torch_ddp.py &
    RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 python3 examples/torch_ddp.py

(with PYTHONPATH=build/python, or an installed collx). A plain torch script: collx-run sets
what torchrun sets (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ...; Debian's torchrun 1.13
itself fails under Python 3.11 before it starts a rank). Every rank trains the same small
model on its own batches; DDP averages the gradients over the ranks with backend collx.
The same run is repeated with backend gloo on a second process group, and both must end
with the same parameters.
"""
import copy

import torch
import torch.distributed as dist

import collx.torch  # noqa: F401  (registers the backend "collx")

dist.init_process_group("collx")  # env://: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
rank, size = dist.get_rank(), dist.get_world_size()
gloo = dist.new_group(backend="gloo")

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))


def train(group, steps=20):
    net = torch.nn.parallel.DistributedDataParallel(copy.deepcopy(model), process_group=group)
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(rank)  # this rank's shard of the data
    w_true = torch.linspace(-1, 1, 16)
    for _ in range(steps):
        x = torch.randn(32, 16, generator=gen)
        y = (x @ w_true).unsqueeze(1)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(net(x), y)
        loss.backward()  # DDP all-reduces the gradients here, bucket by bucket
        opt.step()
    return net.module, loss.item()


trained, loss = train(dist.group.WORLD)  # backend collx
reference, ref_loss = train(gloo)  # backend gloo
diff = max((a - b).abs().max().item()
           for a, b in zip(trained.parameters(), reference.parameters()))
if rank == 0:
    print("%d ranks: loss %.4f with collx, %.4f with gloo; max parameter difference %.2g"
          % (size, loss, ref_loss, diff))
assert diff < 1e-5, diff
dist.destroy_process_group()
