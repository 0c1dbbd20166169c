"""What a torch 2.x user expects of a CPU backend, on spmd, in one process
group of 4: bf16 and fp16 all_reduce with SUM and AVG exact and the same on
every rank, list and single-tensor all_to_all (uneven, bf16),
reduce_scatter_tensor and all_gather_into_tensor (flat and stacked),
coalesced operations, batch_isend_irecv, monitored_barrier, the object
collectives, futures and an operation's own timeout that does not expire.
Run by a launcher at world 4; torch 2.x only (tests/torch.cmake)."""
import datetime

import torch
import torch.distributed as dist

import spmd_torch  # noqa: F401  registers "spmd"


def same_on_every_rank(t, what):
    """t is bit for bit the same on every rank."""
    bits = t.view(torch.int16) if t.element_size() == 2 else t
    every = [torch.empty_like(bits) for _ in range(dist.get_world_size())]
    dist.all_gather(every, bits)
    for q, b in enumerate(every):
        assert torch.equal(b, bits), f"{what}: rank {q} differs from rank {dist.get_rank()}"


def check_half_precision(rank, world):
    for dt in (torch.bfloat16, torch.float16):
        # values whose sums and means are exact in 8 bits of mantissa
        t = torch.tensor([rank, -2.0 * rank, 0.5, 64.0 * (rank + 1)], dtype=dt)
        ref = torch.tensor([6.0, -12.0, 2.0, 640.0], dtype=dt)
        x = t.clone()
        dist.all_reduce(x)
        assert torch.equal(x, ref), (dt, x)
        x = t.clone()
        dist.all_reduce(x, op=dist.ReduceOp.AVG)
        assert torch.equal(x, ref / world), (dt, "AVG", x)
        # random values: close to the exact sum, and one answer everywhere
        g = torch.Generator().manual_seed(rank)
        t = torch.randn(4099, generator=g).to(dt)  # odd length: uneven chunks
        exact = sum(torch.randn(4099, generator=torch.Generator().manual_seed(q)).to(dt).double()
                    for q in range(world))
        for op, want in ((dist.ReduceOp.SUM, exact), (dist.ReduceOp.AVG, exact / world)):
            x = t.clone()
            dist.all_reduce(x, op=op)
            same_on_every_rank(x, f"{dt} {op}")
            assert torch.allclose(x.double(), want, rtol=2e-2, atol=5e-2), (dt, op)
        for op in (dist.ReduceOp.MIN, dist.ReduceOp.MAX, dist.ReduceOp.PRODUCT):
            x = torch.full((3,), float(rank + 1), dtype=dt)
            dist.all_reduce(x, op=op)
            want = {dist.ReduceOp.MIN: 1.0, dist.ReduceOp.MAX: float(world),
                    dist.ReduceOp.PRODUCT: float(torch.arange(1, world + 1).prod())}[op]
            assert x.tolist() == [want] * 3, (dt, op, x)


def check_all_to_all(rank, world):
    # list form: rank r sends j + 1 bf16 values to rank j
    ins = [torch.full((j + 1,), float(10 * rank + j), dtype=torch.bfloat16) for j in range(world)]
    outs = [torch.empty(rank + 1, dtype=torch.bfloat16) for _ in range(world)]
    dist.all_to_all(outs, ins)
    assert [o.tolist() for o in outs] == [[float(10 * q + rank)] * (rank + 1) for q in range(world)]
    # single tensor, even and uneven splits, 2-D rows
    inp = torch.arange(world * 3, dtype=torch.int64).reshape(world, 3) + 100 * rank
    out = torch.empty_like(inp)
    dist.all_to_all_single(out, inp)
    assert out.tolist() == [[100 * q + 3 * rank + k for k in range(3)] for q in range(world)]
    in_splits = [(rank + j) % 3 for j in range(world)]
    out_splits = [(q + rank) % 3 for q in range(world)]
    inp = torch.cat([torch.full(((rank + j) % 3, 2), float(rank), dtype=torch.float16)
                     for j in range(world)])
    out = torch.empty(sum(out_splits), 2, dtype=torch.float16)
    dist.all_to_all_single(out, inp, out_splits, in_splits)
    assert out[:, 0].tolist() == [float(q) for q in range(world) for _ in range(out_splits[q])]


def check_tensor_collectives(rank, world):
    # all_gather_into_tensor: flat and stacked outputs
    inp = torch.tensor([rank, rank + 0.5], dtype=torch.float64)
    flat = torch.empty(2 * world, dtype=torch.float64)
    dist.all_gather_into_tensor(flat, inp)
    assert flat.tolist() == [v for q in range(world) for v in (q, q + 0.5)]
    stacked = torch.empty(world, 2, dtype=torch.float64)
    dist.all_gather_into_tensor(stacked, inp)
    assert torch.equal(stacked.reshape(-1), flat)
    # reduce_scatter_tensor: SUM, AVG (bf16), MAX, from a stacked input
    x = torch.arange(3 * world, dtype=torch.float32) * (rank + 1)
    out = torch.empty(3)
    dist.reduce_scatter_tensor(out, x)
    tot = world * (world + 1) // 2
    assert out.tolist() == [float(tot * (3 * rank + k)) for k in range(3)], out
    xb = torch.full((world, 4), float(2 * rank), dtype=torch.bfloat16)
    outb = torch.empty(4, dtype=torch.bfloat16)
    dist.reduce_scatter_tensor(outb, xb, op=dist.ReduceOp.AVG)
    assert outb.tolist() == [float(world - 1)] * 4, outb
    dist.reduce_scatter_tensor(out, x, op=dist.ReduceOp.MAX)
    assert out.tolist() == [float(world * (3 * rank + k)) for k in range(3)], out


def check_coalesced(rank, world):
    ts = [torch.full((2,), float(rank)), torch.full((3,), float(rank), dtype=torch.float64)]
    dist.all_reduce_coalesced([ts[0], torch.ones(5)])
    assert ts[0].tolist() == [float(sum(range(world)))] * 2
    with dist._coalescing_manager(async_ops=True) as cm:
        for t in ts:
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
    cm.wait()
    assert ts[0].tolist() == [float(sum(range(world)))] * 2 and ts[1].tolist() == [world - 1.0] * 3
    outs = [[torch.empty(2), torch.empty(1)] for _ in range(world)]  # per rank, per input
    dist.all_gather_coalesced(outs, [torch.full((2,), float(rank)), torch.tensor([-rank * 1.0])])
    assert [o[0].tolist() for o in outs] == [[float(q)] * 2 for q in range(world)]
    assert [o[1].tolist() for o in outs] == [[-q * 1.0] for q in range(world)]


def check_batch_p2p(rank, world):
    right, left = (rank + 1) % world, (rank - 1) % world
    to_right, to_left = torch.full((3,), float(rank)), torch.full((5,), -float(rank), dtype=torch.float64)
    from_left, from_right = torch.empty(3), torch.empty(5, dtype=torch.float64)
    ops = [dist.P2POp(dist.isend, to_right, right), dist.P2POp(dist.irecv, from_left, left),
           dist.P2POp(dist.isend, to_left, left), dist.P2POp(dist.irecv, from_right, right)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    assert from_left.tolist() == [float(left)] * 3 and from_right.tolist() == [-float(right)] * 5


def check_objects(rank, world):
    got = [None] * world
    dist.all_gather_object(got, {"rank": rank, "name": f"r{rank}"})
    assert got == [{"rank": q, "name": f"r{q}"} for q in range(world)]
    objs = [rank, "x", {"k": [rank]}]
    dist.broadcast_object_list(objs, src=2)
    assert objs == [2, "x", {"k": [2]}]
    one = [None]
    dist.scatter_object_list(one, [("part", q) for q in range(world)] if rank == 1 else None, src=1)
    assert one == [("part", rank)]
    gathered = [None] * world if rank == 3 else None
    dist.gather_object(rank * rank, gathered, dst=3)
    if rank == 3:
        assert gathered == [q * q for q in range(world)]
    if rank == 0:
        dist.send_object_list([{"to": 1}], dst=1)
    elif rank == 1:
        box = [None]
        dist.recv_object_list(box, src=0)
        assert box == [{"to": 1}]


def check_futures(rank, world):
    w = dist.all_reduce(torch.full((100,), float(rank)), async_op=True)
    fut = w.get_future().then(lambda f: f.value()[0] * 2)
    assert fut.wait().eq(2.0 * sum(range(world))).all()
    # (Work.exception() cannot return to Python in torch 2.6, for any backend:
    # pybind11 has no conversion of std::exception_ptr)
    assert w.is_completed() and w.is_success()
    futs = [dist.all_reduce(torch.ones(10), async_op=True).get_future() for _ in range(8)]
    for f in torch.futures.collect_all(futs).wait():
        assert f.value()[0].eq(float(world)).all()
    out = torch.empty(world)
    g = dist.all_gather_into_tensor(out, torch.tensor([float(rank)]), async_op=True).get_future()
    assert g.wait()[0].tolist() == [float(q) for q in range(world)]


def check_monitored_barrier(rank, world):
    dist.monitored_barrier(timeout=datetime.timedelta(seconds=300))
    dist.monitored_barrier(timeout=datetime.timedelta(seconds=300), wait_all_ranks=True)
    dist.monitored_barrier()


def check_op_timeout(rank, world):
    # an operation's own timeout that every rank meets in time
    opts = dist.AllreduceOptions()
    opts.timeout = datetime.timedelta(seconds=300)
    t = torch.full((3,), float(rank))
    dist.group.WORLD.allreduce([t], opts).wait()
    assert t.tolist() == [float(sum(range(world)))] * 3
    bopts = dist.BarrierOptions()
    bopts.timeout = datetime.timedelta(seconds=300)
    dist.group.WORLD.barrier(bopts).wait()


def main():
    dist.init_process_group("spmd")
    rank, world = dist.get_rank(), dist.get_world_size()
    check_half_precision(rank, world)
    check_all_to_all(rank, world)
    check_tensor_collectives(rank, world)
    check_coalesced(rank, world)
    check_batch_p2p(rank, world)
    check_objects(rank, world)
    check_futures(rank, world)
    check_monitored_barrier(rank, world)
    check_op_timeout(rank, world)
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        print("torch2_features: ok", flush=True)


if __name__ == "__main__":
    main()
