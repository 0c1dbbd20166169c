"""A 2-D DeviceMesh on CPU over spmd: 4 processes as a 2 x 2 grid, data
parallel along "dp" and tensor parallel along "tp", with collectives on
each sub-mesh.

    spmdrun --standalone --nproc-per-node 4 python3 examples/torch2/device_mesh_2d.py
    torchrun --nproc-per-node 4 examples/torch2/device_mesh_2d.py
"""
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

import spmd_torch  # noqa: F401  registers the "spmd" backend


def demo():
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    rank = dist.get_rank()
    dp, tp = mesh["dp"], mesh["tp"]  # 1-D sub-meshes holding this rank
    # sum over this rank's row (its tp group) and column (its dp group)
    row = torch.tensor([float(rank)])
    dist.all_reduce(row, group=tp.get_group())
    col = torch.tensor([float(rank)])
    dist.all_reduce(col, group=dp.get_group())
    # gather the row's ranks, broadcast from the column's first rank
    peers = torch.empty(2, dtype=torch.int64)
    dist.all_gather_into_tensor(peers, torch.tensor([rank]), group=tp.get_group())
    first = torch.tensor([rank])
    dist.broadcast(first, src=dp.mesh[0].item(), group=dp.get_group())
    print(f"rank {rank} at {mesh.get_coordinate()}: row sum {row.item():.0f}, "
          f"column sum {col.item():.0f}, row {peers.tolist()}, column head {first.item()}",
          flush=True)
    return row.item(), col.item(), peers.tolist(), first.item()


if __name__ == "__main__":
    dist.init_process_group("spmd")
    demo()
    dist.destroy_process_group()
