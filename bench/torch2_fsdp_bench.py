#!/usr/bin/env python3
"""FSDP training step time on CPU, spmd against gloo, same run.

  PYTHONPATH=build/python python3 bench/torch2_fsdp_bench.py [--worlds 2,4]
      [--width 1152] [--layers 8] [--batch 16] [--steps 10] [--reps 2]

A stack of --layers Linear(width, width) + ReLU (8 x 1152: 10.6 M
parameters), each Linear its own FullyShardedDataParallel unit (all_gather
of its weights in forward and backward, reduce_scatter of its gradients),
SGD.  For each world size and backend, spawns the ranks (one thread each,
file:// rendezvous), runs 2 warm-up steps, then times --steps steps (the
slowest rank's mean); --reps rounds alternate the backends and the best
round of each is kept.  Prints one table per world: backend, step time,
gloo/spmd.  A torch without FSDP on CPU says so and stops (Debian 12's
1.13: torch.distributed.fsdp does not import under Python 3.11)."""
import argparse
import os
import tempfile
import time

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn


def model(width, layers):
    torch.manual_seed(0)
    mods = []
    for _ in range(layers):
        mods += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*mods)


def worker(rank, world, backend, store, a, out):
    torch.set_num_threads(1)
    import spmd_torch  # noqa: F401
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy
    dist.init_process_group(backend, init_method="file://" + store, rank=rank, world_size=world)
    m = FSDP(model(a.width, a.layers), device_id=torch.device("cpu"),
             auto_wrap_policy=ModuleWrapPolicy({nn.Linear}))
    opt = torch.optim.SGD(m.parameters(), lr=1e-3)
    x = torch.randn(a.batch, a.width)

    def step():
        opt.zero_grad()
        m(x).square().mean().backward()
        opt.step()

    for _ in range(2):
        step()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    mean = torch.tensor([(time.perf_counter() - t0) / a.steps], dtype=torch.float64)
    dist.all_reduce(mean, op=dist.ReduceOp.MAX)
    if rank == 0:
        with open(out, "w") as f:
            f.write(repr(mean.item()))
    dist.destroy_process_group()


def run(world, backend, a):
    d = tempfile.mkdtemp(prefix="torch2_fsdp_bench_")
    store, out = os.path.join(d, "store"), os.path.join(d, "out")
    try:
        mp.spawn(worker, args=(world, backend, store, a, out), nprocs=world)
        with open(out) as f:
            return float(f.read())
    finally:
        for p in (store, out):
            if os.path.exists(p):
                os.unlink(p)
        os.rmdir(d)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worlds", default="2,4")
    ap.add_argument("--width", type=int, default=1152)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--reps", type=int, default=2)
    a = ap.parse_args()
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel  # noqa: F401
        import inspect
        if "device_id" not in inspect.signature(FullyShardedDataParallel.__init__).parameters:
            raise ImportError("no device_id")
    except Exception as e:  # (Debian 12's torch 1.13 under Python 3.11: a ValueError at import)
        raise SystemExit(f"torch {torch.__version__}: no FSDP on CPU here ({type(e).__name__}: {e})")
    params = sum(p.numel() for p in model(a.width, a.layers).parameters())
    print(f"torch {torch.__version__}, nproc {os.cpu_count()}, FSDP of {params / 1e6:.1f} M "
          f"parameters ({a.layers} x Linear({a.width}, {a.width})), batch {a.batch}, "
          f"{a.steps} steps, slowest rank's mean, best of {a.reps}")
    for world in (int(w) for w in a.worlds.split(",")):
        best = {"spmd": float("inf"), "gloo": float("inf")}
        for _ in range(a.reps):
            for backend in best:
                try:
                    best[backend] = min(best[backend], run(world, backend, a))
                except Exception as e:  # (mp.spawn's: a rank failed) say which run
                    raise SystemExit(f"world {world}, {backend}: {e}")
        print(f"\nworld {world}\n| backend | step |\n|---|---:|")
        for backend, t in best.items():
            print(f"| {backend} | {t * 1000:.1f} ms |")
        print(f"gloo/spmd: {best['gloo'] / best['spmd']:.2f}×", flush=True)


if __name__ == "__main__":
    main()
