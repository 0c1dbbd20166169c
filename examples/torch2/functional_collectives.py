"""torch's functional collectives (what torch.compile and DTensor use) on
CPU over spmd: they return tensors instead of filling them, and find the
process group by name.

    spmdrun --standalone --nproc-per-node 4 python3 examples/torch2/functional_collectives.py
    torchrun --nproc-per-node 4 examples/torch2/functional_collectives.py
"""
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

import spmd_torch  # noqa: F401  registers the "spmd" backend


def demo():
    rank, world = dist.get_rank(), dist.get_world_size()
    group = dist.group.WORLD
    x = torch.arange(2 * world, dtype=torch.float32) + rank
    summed = funcol.all_reduce(x, "sum", group)
    gathered = funcol.all_gather_tensor(torch.tensor([rank, rank * rank]), 0, group)
    scattered = funcol.reduce_scatter_tensor(x, "sum", 0, group)
    mean = funcol.all_reduce(torch.tensor([float(rank)]), "avg", group)
    if rank == 0:
        print(f"all_reduce {summed.tolist()}\nall_gather_tensor {gathered.tolist()}\n"
              f"reduce_scatter_tensor (rank 0's part) {scattered.tolist()}\n"
              f"mean of the ranks {mean.item()}", flush=True)
    return summed, gathered, scattered, mean


if __name__ == "__main__":
    dist.init_process_group("spmd")
    demo()
    dist.destroy_process_group()
