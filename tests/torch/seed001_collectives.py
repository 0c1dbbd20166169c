"""Seed 001's collective assertions (all_reduce, reduce, broadcast, all_gather,
reduce_scatter) at world 4 on spmd, launched by torchrun or spmdrun.
Changed: the backend name, CPU tensors instead of device=rank, the rank and
world size from the launcher instead of set by hand with a fixed port."""
import os

import torch
import torch.distributed as dist

import spmd_torch  # noqa: F401


def all_reduce(rank):
    t = torch.ones((5, 5)) * rank
    # t = p0.t + p1.t + p2.t + p3.t
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    assert t.mean().item() == 6  # [0, 1, 2, 3]


def reduce(rank):
    t = torch.ones((5, 5)) * rank
    dist.reduce(t, dst=0, op=dist.ReduceOp.SUM)
    # print(f"{os.getpid()}: {t.mean().item()}")
    if rank == 0:
        assert t.mean().item() == 6
    else:
        # (the seed notes gloo gets this wrong; spmd leaves non-roots' input alone)
        assert t.mean().item() == rank


def boardcast(rank):
    t = torch.ones((5, 5)) * rank
    # broadcast rank 3's t to the other processes
    dist.broadcast(t, src=3)
    assert t.mean().item() == 3


def all_gather(rank):
    t = torch.ones((5, 5)) * rank
    outputs = []
    for _ in range(dist.get_world_size()):
        outputs.append(torch.zeros((5, 5)))
    dist.all_gather(outputs, t)
    gather = torch.concat(outputs, dim=0)
    assert gather.shape == torch.Size([20, 5])
    assert gather.float().mean() == torch.tensor([0, 1.0, 2.0, 3.0]).mean()


def reduce_scatter(rank):
    world_size = dist.get_world_size()
    t = torch.ones((world_size * 5, 5)) * rank
    l = torch.split(t, 5, dim=0)
    reduce_rst = torch.zeros((5, 5))
    # torch 1.13 wants contiguous inputs: split's views along dim 0 are
    dist.reduce_scatter(reduce_rst, list(l), dist.ReduceOp.SUM)
    assert reduce_rst.mean().item() == 6


def main_process(rank, world_size):
    dist.init_process_group(backend="spmd")
    all_reduce(rank)
    reduce(rank)
    boardcast(rank)
    all_gather(rank)
    reduce_scatter(rank)
    dist.destroy_process_group()
    print(f"rank {rank}: collective assertions hold", flush=True)


if __name__ == "__main__":
    main_process(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
