"""What torch 2.x builds on a c10d backend, on spmd: the backend registered
for CPU under torch's own (named) ProcessGroup, functional collectives (which
find the group by its name), DeviceMesh with a 2-D mesh and its sub-groups,
and the coalesced all_gather_into_tensor / reduce_scatter_tensor FSDP issues
under _coalescing_manager.  Run by a launcher at world 4 (a 2 x 2 mesh);
torch 2.x only (tests/torch.cmake)."""
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch.distributed.device_mesh import init_device_mesh

import spmd_torch  # noqa: F401  registers "spmd"


def check_backend(rank, world):
    pg = dist.group.WORLD
    assert dist.get_backend(pg) == "spmd", dist.get_backend(pg)
    assert pg.group_name, "the default group has no name"
    b = pg._get_backend(torch.device("cpu"))
    assert isinstance(b, torch._C._distributed_c10d.Backend), type(b)
    assert b.rank() == rank and b.size() == world


def check_functional(rank, world):
    pg = dist.group.WORLD
    t = torch.full((4,), float(rank + 1))
    r = funcol.all_reduce(t, "sum", pg)
    assert torch.equal(r.wait() if hasattr(r, "wait") else r,
                       torch.full((4,), float(world * (world + 1) // 2)))
    g = funcol.all_gather_tensor(torch.tensor([rank, 10 * rank]), 0, pg)
    assert g.tolist() == [v for q in range(world) for v in (q, 10 * q)], g
    x = torch.arange(2 * world, dtype=torch.float32) + rank
    s = funcol.reduce_scatter_tensor(x, "sum", 0, pg)
    ref = sum(torch.arange(2 * world, dtype=torch.float32) + q for q in range(world))
    assert torch.equal(s, ref[2 * rank:2 * rank + 2]), (s, ref)


def check_mesh(rank, world):
    mesh = init_device_mesh("cpu", (2, world // 2), mesh_dim_names=("dp", "tp"))
    dp, tp = mesh.get_group("dp"), mesh.get_group("tp")
    assert dist.get_backend(dp) == "spmd" and dist.get_backend(tp) == "spmd"
    # rank = dp_index * (world // 2) + tp_index
    t = torch.tensor([float(rank)])
    dist.all_reduce(t, group=tp)
    row = rank // (world // 2)
    assert t.item() == sum(row * (world // 2) + i for i in range(world // 2)), t
    t = torch.tensor([float(rank)])
    dist.all_reduce(t, group=dp)
    col = rank % (world // 2)
    assert t.item() == sum(col + j * (world // 2) for j in range(2)), t
    # functional collectives over a mesh dimension
    r = funcol.all_reduce(torch.ones(3), "sum", (mesh, 1))
    assert torch.equal(r, torch.full((3,), float(world // 2))), r


def check_coalesced(rank, world):
    ins = [torch.full((3,), float(rank)), torch.full((2,), float(10 * rank))]
    outs = [torch.empty(3 * world), torch.empty(2 * world)]
    with dist._coalescing_manager(async_ops=True) as cm:
        for o, i in zip(outs, ins):
            dist.all_gather_into_tensor(o, i)
    cm.wait()
    assert outs[0].tolist() == [float(q) for q in range(world) for _ in range(3)], outs[0]
    assert outs[1].tolist() == [float(10 * q) for q in range(world) for _ in range(2)], outs[1]
    ins = [torch.arange(world * 2, dtype=torch.float64) * (rank + 1),
           torch.ones(world * 3, dtype=torch.bfloat16)]
    outs = [torch.empty(2, dtype=torch.float64), torch.empty(3, dtype=torch.bfloat16)]
    with dist._coalescing_manager():
        for o, i in zip(outs, ins):
            dist.reduce_scatter_tensor(o, i)
    tot = world * (world + 1) // 2
    assert outs[0].tolist() == [float(tot * (2 * rank + k)) for k in range(2)], outs[0]
    assert outs[1].tolist() == [float(world)] * 3, outs[1]
    ts = [torch.full((2,), float(rank)), torch.full((5,), 1.0)]
    with dist._coalescing_manager():
        for t in ts:
            dist.all_reduce(t)
    assert ts[0].tolist() == [float(sum(range(world)))] * 2 and ts[1].tolist() == [float(world)] * 5


def main():
    dist.init_process_group("spmd")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world % 2 == 0, "run at an even world size (a 2 x world/2 mesh)"
    check_backend(rank, world)
    check_functional(rank, world)
    check_mesh(rank, world)
    check_coalesced(rank, world)
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        print("torch2_api: ok")


if __name__ == "__main__":
    main()
