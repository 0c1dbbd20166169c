"""What torch's own distributed suite (tests/torch/suite) checks of a backend
beyond its results, on spmd, in fresh forked ranks (file:// rendezvous):

- the profiler's events: all_gather and all_gather_coalesced are recorded as
  "spmd:all_gather", all_reduce_coalesced as "spmd:all_reduce" (gloo's names
  with spmd's prefix), one event per call, with the shapes of the op's
  *inputs* (the suite's call_dist_op compares them: before, the all_gather
  list's world_size outputs were recorded, and the coalesced ops had names of
  their own, so the suite found no event);
- sequence numbers: the backend counts the collectives it issued (from 0 on
  every rank, point-to-point not counted), and under
  TORCH_DISTRIBUTED_DEBUG=DETAIL a new group's all_gather_object works
  (torch 2.x wraps the backend in its ProcessGroupWrapper, which asks for
  them before every collective; before: "Backend spmd does not yet support
  sequence numbers");
- the backend's name, as DDP's logger records it ("backend_name") and
  pg.name() returns: "spmd", what dist.get_backend() says (torch 2.x names
  every third-party backend's ProcessGroup "custom"; spmd_torch's is its own,
  _named_group.py).

Runs on torch 1.13 and 2.x."""
import multiprocessing
import os
import sys
import tempfile

import torch
import torch.distributed as dist

import spmd_torch  # noqa: F401  registers "spmd"

HANG_GUARD = 240  # seconds: a rank still running after this has hung


def events_named(prof, name):
    return [e for e in prof.function_events if e.name == name]


def profiled(fn):
    with torch.autograd.profiler.profile(record_shapes=True) as prof:
        fn()
    return prof


def check_profiler_events(rank, world):
    # all_gather into a list: one event, the input's shape
    x = torch.full((2, 3), float(rank))
    outs = [torch.empty(2, 3) for _ in range(world)]
    ev = events_named(profiled(lambda: dist.all_gather(outs, x)), "spmd:all_gather")
    assert len(ev) == 1, f"all_gather: {len(ev)} events named spmd:all_gather"
    assert ev[0].input_shapes == [[2, 3]], f"all_gather recorded {ev[0].input_shapes}"
    assert all(torch.equal(o, torch.full((2, 3), float(r))) for r, o in enumerate(outs)), outs

    # all_gather_coalesced: one event, every input's shape (an empty one too)
    ins = [torch.full((2, 2), float(rank)), torch.ones(0), torch.full((3,), rank + 1.0)]
    lists = [[torch.empty_like(t) for t in ins] for _ in range(world)]
    ev = events_named(profiled(lambda: dist.all_gather_coalesced(lists, ins)), "spmd:all_gather")
    assert len(ev) == 1, f"all_gather_coalesced: {len(ev)} events named spmd:all_gather"
    assert ev[0].input_shapes == [[2, 2], [0], [3]], f"all_gather_coalesced recorded {ev[0].input_shapes}"
    for r in range(world):
        assert torch.equal(lists[r][0], torch.full((2, 2), float(r))), lists[r]
        assert torch.equal(lists[r][2], torch.full((3,), r + 1.0)), lists[r]

    # all_reduce_coalesced: one event named as all_reduce, every tensor's shape
    ts = [torch.full((1,), rank + 1.0), torch.full((2, 2), 2.0 * rank)]
    ev = events_named(profiled(lambda: dist.all_reduce_coalesced(ts)), "spmd:all_reduce")
    assert len(ev) == 1, f"all_reduce_coalesced: {len(ev)} events named spmd:all_reduce"
    assert ev[0].input_shapes == [[1], [2, 2]], f"all_reduce_coalesced recorded {ev[0].input_shapes}"
    total = sum(range(1, world + 1))
    assert torch.equal(ts[0], torch.full((1,), float(total))), ts[0]
    assert torch.equal(ts[1], torch.full((2, 2), 2.0 * sum(range(world)))), ts[1]


def sequence_number(group):
    """The spmd backend's count of the group's collectives."""
    if hasattr(group, "_get_backend"):  # torch 2.x: the backend under torch's ProcessGroup
        group = group._get_backend(torch.device("cpu"))
    return group._get_sequence_number_for_group()


def check_sequence_numbers(rank, world):
    g = dist.new_group(list(range(world)))
    assert sequence_number(g) == 0, sequence_number(g)
    dist.all_reduce(torch.ones(2), group=g)
    dist.broadcast(torch.ones(2), 0, group=g)
    dist.barrier(group=g)
    # point-to-point is not counted (ranks send different amounts)
    if rank == 0:
        for r in range(1, world):
            dist.send(torch.ones(1), r, group=g)
    else:
        dist.recv(torch.ones(1), 0, group=g)
    assert sequence_number(g) == 3, f"rank {rank}: sequence number {sequence_number(g)}, want 3"
    # the same on every rank, as torch's desync checks expect
    seqs = [None] * world
    dist.all_gather_object(seqs, sequence_number(g))
    assert len(set(seqs)) == 1, seqs


def check_ddp_backend_name(rank, world):
    # DDP's logger records the group's backend name; the suite expects
    # dist.get_backend()'s (before, torch 2.x's ProcessGroup said "custom")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2))
    model(torch.ones(3, 4)).sum().backward()
    name = model._get_ddp_logging_data().get("backend_name")
    assert name == dist.get_backend() == "spmd", f"DDP logged backend_name {name!r}"
    assert dist.group.WORLD.name() == "spmd", dist.group.WORLD.name()


def check_detail_subgroup(rank, world):
    # what the suite's test_all_gather_object_subgroup does under DETAIL
    sub = dist.new_group(backend=dist.get_backend())
    got = [None] * world
    dist.all_gather_object(got, {"rank": rank}, group=sub)
    assert got == [{"rank": r} for r in range(world)], got


def run_rank(rank, world, path, q):
    try:
        dist.init_process_group("spmd", init_method="file://" + path, rank=rank, world_size=world)
        check_profiler_events(rank, world)
        check_sequence_numbers(rank, world)
        check_ddp_backend_name(rank, world)
        if os.environ.get("TORCH_DISTRIBUTED_DEBUG") == "DETAIL":
            check_detail_subgroup(rank, world)
        dist.destroy_process_group()
        q.put((rank, "ok"))
    except BaseException as e:  # reported by the driver, with the rank
        q.put((rank, f"{type(e).__name__}: {e}"))
        raise


def run_world(world, detail):
    if detail:
        os.environ["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"
    else:
        os.environ.pop("TORCH_DISTRIBUTED_DEBUG", None)
    print(f"world {world}, TORCH_DISTRIBUTED_DEBUG={'DETAIL' if detail else 'OFF'}:", flush=True)
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    path = tempfile.mktemp(prefix="spmd_torch_suite_parity_")
    procs = [ctx.Process(target=run_rank, args=(r, world, path, q)) for r in range(world)]
    for p in procs:
        p.start()
    results = dict(q.get(timeout=HANG_GUARD) for _ in procs)
    for p in procs:
        p.join(HANG_GUARD)
        assert not p.is_alive(), f"process {p.pid} hung"
    for r in range(world):
        print(f"  rank {r}: {results[r]}", flush=True)
    bad = {r: m for r, m in results.items() if m != "ok"}
    assert not bad, bad
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]


def main():
    run_world(2, detail=False)
    run_world(3, detail=True)
    print(f"torch {torch.__version__}: profiler events and sequence numbers as the suite expects: ok")


if __name__ == "__main__":
    main()
    sys.exit(0)
