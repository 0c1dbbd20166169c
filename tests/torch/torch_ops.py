"""Every c10d operation torch 1.13 calls, on the spmd backend, checked
against values computed locally.  Run by a launcher (torchrun / spmdrun) at
world 3 (an odd world: no power-of-two shortcut)."""
import warnings

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

import spmd_torch  # noqa: F401  registers "spmd"


def expect_error(fn, *words):
    try:
        fn()
    except (RuntimeError, ValueError) as e:
        for w in words:
            assert w in str(e), f"error {e!r} does not mention {w!r}"
        return
    raise AssertionError(f"no error (expected one mentioning {words})")


def check_reductions(rank, world):
    vals = [torch.arange(6, dtype=torch.float64) + r for r in range(world)]
    stack = torch.stack(vals)
    for op, ref in [(dist.ReduceOp.SUM, stack.sum(0)), (dist.ReduceOp.PRODUCT, stack.prod(0)),
                    (dist.ReduceOp.MIN, stack.min(0).values), (dist.ReduceOp.MAX, stack.max(0).values),
                    (dist.ReduceOp.AVG, stack.mean(0))]:
        for dt in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
            t = vals[rank].to(dt).clone()
            dist.all_reduce(t, op=op)
            assert torch.allclose(t.double(), ref.to(dt).double(), rtol=1e-2), (op, dt, t, ref)
    ints = [torch.tensor([r + 1, 3 * r + 5, 1 << r]) for r in range(world)]
    for dt in (torch.int32, torch.int64, torch.uint8, torch.int8):
        for op, fold in [(dist.ReduceOp.BAND, lambda a, b: a & b), (dist.ReduceOp.BOR, lambda a, b: a | b),
                         (dist.ReduceOp.BXOR, lambda a, b: a ^ b), (dist.ReduceOp.SUM, lambda a, b: a + b)]:
            ref = ints[0].to(dt)
            for x in ints[1:]:
                ref = fold(ref, x.to(dt))
            t = ints[rank].to(dt).clone()
            dist.all_reduce(t, op=op)
            assert torch.equal(t, ref), (op, dt, t, ref)
    b = torch.tensor([rank == 0, True, False])
    dist.all_reduce(b, op=dist.ReduceOp.MAX)
    assert b.tolist() == [True, True, False]
    b = torch.tensor([rank == 0, True, False])
    dist.all_reduce(b, op=dist.ReduceOp.MIN)
    assert b.tolist() == [False, True, False]
    expect_error(lambda: dist.all_reduce(torch.ones(2, dtype=torch.int16)), "Short")
    expect_error(lambda: dist.all_reduce(torch.ones(4, 4).t()), "not contiguous")


def check_collectives(rank, world):
    # broadcast of every root, any dtype (moved as bytes)
    for root in range(world):
        t = torch.full((3,), rank, dtype=torch.int16)
        dist.broadcast(t, src=root)
        assert t.tolist() == [root] * 3
    # reduce: the root gets the sum, the others keep their input
    t = torch.full((5,), float(rank))
    dist.reduce(t, dst=1)
    assert t.tolist() == [float(sum(range(world))) if rank == 1 else float(rank)] * 5
    # allreduce_coalesced
    a, b = torch.full((2, 2), float(rank)), torch.full((3,), float(rank + 1))
    dist.all_reduce_coalesced([a, b])
    s = float(sum(range(world)))
    assert a.eq(s).all() and b.eq(s + world).all()
    # all_gather (list) and _all_gather_base
    outs = [torch.zeros(2, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(outs, torch.tensor([rank, 10 * rank]))
    assert [o.tolist() for o in outs] == [[r, 10 * r] for r in range(world)]
    flat = torch.zeros(world * 2)
    dist._all_gather_base(flat, torch.tensor([rank, 1.0 + rank]))
    assert flat.tolist() == sum([[r, 1.0 + r] for r in range(world)], [])
    # gather / scatter at root 2
    g = [torch.zeros(3) for _ in range(world)] if rank == 2 else None
    dist.gather(torch.full((3,), rank + 0.5), g, dst=2)
    if rank == 2:
        assert [x[0].item() for x in g] == [r + 0.5 for r in range(world)]
    out = torch.zeros(2)
    dist.scatter(out, [torch.full((2,), 7.0 * r) for r in range(world)] if rank == 0 else None, src=0)
    assert out.tolist() == [7.0 * rank] * 2
    # reduce_scatter (list) and _reduce_scatter_base
    out = torch.zeros(2)
    dist.reduce_scatter(out, [torch.full((2,), float(rank * j)) for j in range(world)])
    assert out.tolist() == [float(rank * s)] * 2
    out = torch.zeros(2, dtype=torch.int32)
    dist._reduce_scatter_base(out, torch.arange(2 * world, dtype=torch.int32) + rank)
    assert out.tolist() == [world * (2 * rank + i) + int(s) for i in range(2)]
    # all_to_all (lists of different sizes) and all_to_all_single, even and uneven
    ins = [torch.full((j + 1,), 100.0 * rank + j) for j in range(world)]
    outs = [torch.zeros(rank + 1) for _ in range(world)]
    dist.all_to_all(outs, ins)
    assert [o.tolist() for o in outs] == [[100.0 * i + rank] * (rank + 1) for i in range(world)]
    inp = torch.arange(world * 2, dtype=torch.float64) + 100 * rank
    out = torch.zeros(world * 2, dtype=torch.float64)
    dist.all_to_all_single(out, inp)
    assert out.tolist() == sum([[100.0 * i + 2 * rank, 100.0 * i + 2 * rank + 1] for i in range(world)], [])
    # uneven: rank r sends j+1 rows of 2 to rank j
    in_splits = [j + 1 for j in range(world)]
    out_splits = [rank + 1] * world
    inp = torch.cat([torch.full((j + 1, 2), float(10 * rank + j)) for j in range(world)])
    out = torch.zeros(sum(out_splits), 2)
    dist.all_to_all_single(out, inp, out_splits, in_splits)
    assert out.tolist() == sum([[[float(10 * i + rank)] * 2] * (rank + 1) for i in range(world)], [])
    dist.barrier()


def check_p2p_and_async(rank, world):
    # recv from any source
    if rank == 0:
        seen = set()
        for _ in range(world - 1):
            t = torch.zeros(1)
            src = dist.recv(t)
            assert t.item() == src * 3.0
            seen.add(src)
        assert seen == set(range(1, world))
    else:
        dist.send(torch.tensor([rank * 3.0]), 0)
    # async collectives finish without wait() (the completer), futures chain
    t = torch.full((1000,), float(rank))
    work = dist.all_reduce(t, async_op=True)
    fut = work.get_future().then(lambda f: f.value()[0] * 2)
    assert fut.wait().eq(2.0 * sum(range(world))).all()
    assert work.is_completed()  # (Work.exception() has no Python binding in torch 1.13)
    works = [dist.all_reduce(torch.ones(10), async_op=True) for _ in range(20)]
    for w in works:
        w.wait()


def check_subgroups(rank, world):
    even = dist.new_group([0, 2])
    odd = dist.new_group([1])
    t = torch.ones(1) * rank
    if rank in (0, 2):
        dist.all_reduce(t, group=even)
        assert t.item() == 2.0
        assert dist.get_rank(even) == rank // 2
    else:
        dist.all_reduce(t, group=odd)
        assert t.item() == rank
    dist.barrier()


def check_ddp(rank, world):
    torch.manual_seed(rank)  # different initial weights: DDP broadcasts rank 0's
    model = DDP(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)), bucket_cap_mb=0.0001)
    model.register_comm_hook(None, default_hooks.fp16_compress_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        x = torch.randn(4, 8)
        if step == 0:
            with model.no_sync():  # accumulate locally; the next backward syncs the sum
                model(x).sum().backward()
            continue
        model(x).sum().backward()
        opt.step()
        opt.zero_grad()
    params = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    allp = [torch.zeros_like(params) for _ in range(world)]
    dist.all_gather(allp, params)
    for p in allp:
        assert torch.allclose(p, allp[0], atol=1e-6), "DDP replicas diverged"


def main():
    warnings.filterwarnings("ignore", category=UserWarning)  # torch's deprecation notes
    dist.init_process_group("spmd")
    rank, world = dist.get_rank(), dist.get_world_size()
    check_reductions(rank, world)
    check_collectives(rank, world)
    check_p2p_and_async(rank, world)
    check_subgroups(rank, world)
    check_ddp(rank, world)
    dist.destroy_process_group()
    print(f"rank {rank}: all c10d operations ok", flush=True)


if __name__ == "__main__":
    main()
