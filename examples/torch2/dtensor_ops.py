"""DTensor on CPU over spmd: a tensor sharded by rows, replicated, resharded
by columns; a sharded matmul whose partial sums are all-reduced.

    spmdrun --standalone --nproc-per-node 4 python3 examples/torch2/dtensor_ops.py
    torchrun --nproc-per-node 4 examples/torch2/dtensor_ops.py
"""
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor

import spmd_torch  # noqa: F401  registers the "spmd" backend


def demo():
    world = dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    torch.manual_seed(0)  # the same full tensors on every rank
    a = torch.randn(4 * world, 2 * world)
    b = torch.randn(2 * world, 3)
    rows = distribute_tensor(a, mesh, [Shard(0)])       # each rank holds 4 rows
    cols = rows.redistribute(mesh, [Shard(1)])          # all_to_all: 2 columns each
    full = cols.redistribute(mesh, [Replicate()])       # all_gather
    # columns of a times rows of b: each rank's product is a partial sum,
    # which redistribute() all-reduces
    prod = (cols @ distribute_tensor(b, mesh, [Shard(0)])).redistribute(mesh, [Replicate()])
    # elementwise ops and reductions stay sharded until asked
    total = (rows * 2 + 1).sum().full_tensor()
    if dist.get_rank() == 0:
        print(f"rows {tuple(rows.to_local().shape)} -> cols {tuple(cols.to_local().shape)}; "
              f"matmul error {(prod.to_local() - a @ b).abs().max().item():.2e}; "
              f"sum {total.item():.4f} (local {(a * 2 + 1).sum().item():.4f})", flush=True)
    return a, b, rows, cols, full, prod, total


if __name__ == "__main__":
    dist.init_process_group("spmd")
    demo()
    dist.destroy_process_group()
