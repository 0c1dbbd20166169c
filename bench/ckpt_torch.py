#!/usr/bin/env python3
"""torch's DCP on the same bytes as bench/ckpt_bench.c: the peer of bench/ckpt_bench.sh.

  python3 bench/ckpt_torch.py SHAPES_FILE WORLD DIR [REPS]

SHAPES_FILE is what ckpt_bench wrote (a tensor's name and shape a line).  WORLD
processes (gloo, file:// init) each hold every tensor as a DTensor sharded on
dim 0 (Shard(0), torch's own row split), float32; dcp.save and dcp.load are
timed between barriers (the slowest rank's time, median of REPS), loads cold
(the data files' pages dropped with posix_fadvise DONTNEED first, as
ckpt_bench does), and dcp.async_save's stall: how long the call blocks.
Prints one line of key=value.  Needs torch 2.x (Debian 13's 2.6:
scripts/torch2-root.sh run -b DIR -- python3 bench/ckpt_torch.py ...).
"""
import os
import statistics
import sys
import tempfile
import time
import warnings

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp


def drop_cache(d):
    for name in os.listdir(d):
        if name.endswith(".distcp"):
            fd = os.open(os.path.join(d, name), os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)


def slowest(t):
    v = torch.tensor([t], dtype=torch.float64)
    dist.all_reduce(v, op=dist.ReduceOp.MAX)
    return v.item()


def rank_main(rank, world, shapes, out, reps, initfile):
    warnings.filterwarnings("ignore")  # DTensor's CPU-random and TypedStorage notices
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + initfile, rank=rank, world_size=world)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    mesh = init_device_mesh("cpu", (world,))
    g = torch.Generator().manual_seed(1)
    sd = {name: distribute_tensor(torch.rand(shape, generator=g) if shape else torch.rand((), generator=g),
                                  mesh, [Shard(0)] if shape else [])
          for name, shape in shapes}
    nbytes = sum(4 * torch.Size(shape).numel() for _, shape in shapes)
    save, load, stall, total = [], [], [], []
    for k in range(reps):
        d = os.path.join(out, f"torch-sync-{k}")
        dist.barrier()
        t0 = time.perf_counter()
        dcp.save(sd, checkpoint_id=d)
        save.append(slowest(time.perf_counter() - t0))
        drop_cache(d)
        dist.barrier()
        t0 = time.perf_counter()
        dcp.load(sd, checkpoint_id=d)
        load.append(slowest(time.perf_counter() - t0))
    for k in range(reps + 1):
        d = os.path.join(out, f"torch-async-{k}")
        dist.barrier()
        t0 = time.perf_counter()
        fut = dcp.async_save(sd, checkpoint_id=d)
        t1 = time.perf_counter()
        fut.result()
        t2 = time.perf_counter()
        if k:  # the first one starts torch's background machinery
            stall.append(slowest(t1 - t0))
            total.append(slowest(t2 - t0))
    if rank == 0:
        s, lo = statistics.median(save), statistics.median(load)
        print(f"impl=torch-{torch.__version__.split('+')[0]} world={world} bytes={nbytes} save_s={s:.4f} "
              f"save_MBps={nbytes / s / 1e6:.0f} load_s={lo:.4f} load_MBps={nbytes / lo / 1e6:.0f} "
              f"async_stall_ms={statistics.median(stall) * 1e3:.3f} async_total_s={statistics.median(total):.4f}",
              flush=True)
    dist.barrier()
    # dcp.async_save's executor thread keeps the process from ending (seen with 2.6).
    sys.stdout.flush()
    os._exit(0)


def main():
    shapes_file, world, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    reps = int(sys.argv[4]) if len(sys.argv) > 4 else 5
    shapes = []
    for line in open(shapes_file):
        f = line.split()
        if f:
            shapes.append((f[0], [int(x) for x in f[1:]]))
    with tempfile.TemporaryDirectory(dir=out) as tmp:
        mp.spawn(rank_main, args=(world, shapes, tmp, reps, os.path.join(tmp, "init")), nprocs=world, join=True)


if __name__ == "__main__":
    main()
