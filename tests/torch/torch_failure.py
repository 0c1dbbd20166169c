"""Failures on the spmd backend: a rank killed in the middle of a collective
makes every survivor's wait() raise a RuntimeError naming that rank (long
before the 10-minute group timeout; gloo would wait for it), and mismatched
collectives raise on every rank instead of hanging."""
import datetime
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import spmd_torch  # noqa: F401
from seed_util import free_port


def init(rank, world, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("spmd", rank=rank, world_size=world,
                            timeout=datetime.timedelta(minutes=10))


def killed_rank(rank, world, port, q):
    init(rank, world, port)
    t = torch.ones(1 << 20)
    dist.all_reduce(t)  # everyone is connected and working
    victim = world - 1
    work = dist.all_reduce(t, async_op=True)
    if rank == victim:
        os.kill(os.getpid(), signal.SIGKILL)  # dies with the collective in flight
    start = time.monotonic()
    try:
        work.wait()
        # a ring step may have finished before the death: the next one cannot
        dist.all_reduce(t)
        q.put((rank, "no error", 0.0))
    except RuntimeError as e:
        q.put((rank, str(e), time.monotonic() - start))


def mismatch(rank, world, port, q, kind):
    init(rank, world, port)
    try:
        if kind == "count":
            dist.all_reduce(torch.ones(4 if rank == 0 else 8))
        elif kind == "root":
            dist.broadcast(torch.ones(4), src=rank)
        elif kind == "op":
            if rank == 0:
                dist.all_reduce(torch.ones(4))
            else:
                dist.broadcast(torch.ones(4), src=0)
        q.put((rank, "no error", 0.0))
    except RuntimeError as e:
        q.put((rank, str(e), 0.0))


def run(fn, world, *args):
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=fn, args=(r, world, port, q) + args) for r in range(world)]
    for p in procs:
        p.start()
    return procs, q


def main():
    world = 3
    procs, q = run(killed_rank, world)
    results = [q.get(timeout=300) for _ in range(world - 1)]
    for p in procs:
        p.join()
    for rank, msg, secs in sorted(results):
        print(f"rank {rank}: raised after {secs:.2f} s: {msg}")
        assert msg != "no error", f"rank {rank}: no error after rank {world - 1} was killed"
        assert f"rank {world - 1}" in msg, f"rank {rank}: the error does not name rank {world - 1}"
        assert secs < 120, "noticed the death only after minutes"
    for kind in ("count", "root", "op"):
        procs, q = run(mismatch, 2, kind)
        results = [q.get(timeout=300) for _ in range(2)]
        for p in procs:
            p.join()
        for rank, msg, _ in sorted(results):
            print(f"mismatched {kind}: rank {rank}: {msg}")
            assert msg != "no error", f"mismatched {kind}: rank {rank} did not raise"
    print("failures are reported")


if __name__ == "__main__":
    main()
    sys.exit(0)
