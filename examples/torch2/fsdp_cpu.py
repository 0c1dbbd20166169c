"""FullyShardedDataParallel training on CPU over spmd: every rank holds a
quarter of the parameters, gathers a layer's weights for its forward and
backward, and reduce-scatters the gradients.

    spmdrun --standalone --nproc-per-node 4 python3 examples/torch2/fsdp_cpu.py
    torchrun --nproc-per-node 4 examples/torch2/fsdp_cpu.py

(torch 2.6's fully_shard, FSDP2, shards a module on a CPU mesh but its
forward stops in torch itself — docs/TORCH.md.)
"""
import functools

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.wrap import ModuleWrapPolicy

import spmd_torch  # noqa: F401  registers the "spmd" backend


def make_model():
    torch.manual_seed(0)  # the same initial weights everywhere
    return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                         nn.Linear(64, 4))


def batch(rank, step):
    g = torch.Generator().manual_seed(1000 * step + rank)  # each rank its own data
    x = torch.randn(8, 16, generator=g)
    return x, x[:, :4].sum(1, keepdim=True).expand(-1, 4)


def demo(steps=3):
    rank = dist.get_rank()
    model = FSDP(make_model(), device_id=torch.device("cpu"),
                 auto_wrap_policy=ModuleWrapPolicy({nn.Linear}))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for step in range(steps):
        x, y = batch(rank, step)
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()  # gradients reduce-scattered (averaged) across ranks
        opt.step()
        losses.append(loss.item())
    local = sum(p.numel() for p in model.parameters())
    total = sum(p.numel() for p in make_model().parameters())
    print(f"rank {rank}: holds {local} of {total} parameters, losses "
          + ", ".join(f"{v:.4f}" for v in losses), flush=True)
    with FSDP.summon_full_params(model):
        return [p.detach().clone() for p in model.parameters()], losses


if __name__ == "__main__":
    dist.init_process_group("spmd")
    demo()
    dist.destroy_process_group()
