"""A torch script with backend gloo alone (no collx): what any torchrun job does first."""
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.ones(2)
dist.all_reduce(t)
assert t.tolist() == [dist.get_world_size()] * 2, t
dist.destroy_process_group()
