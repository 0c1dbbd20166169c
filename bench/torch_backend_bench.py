#!/usr/bin/env python3
"""torch.distributed all_reduce on the spmd backend against gloo, same run.

  PYTHONPATH=build/python python3 bench/torch_backend_bench.py [--worlds 2,4]
      [--min-bytes 4] [--max-bytes 64M] [--iters N]

For each world size, spawns that many processes (one thread each) twice —
backend "spmd" (bindings/torch) then "gloo" — rendezvous by a file store, and
times float32 SUM dist.all_reduce (in place, blocking, as user code calls it)
at sizes ×4 from min to max bytes: 5 warm-ups, then iterations sized to about
0.2 s (at least 5), the slowest rank's mean.  Prints one table per world:
bytes, spmd µs, gloo µs, gloo/spmd."""
import argparse
import os
import sys
import tempfile
import time

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def parse_bytes(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * mult[s[-1].upper()] if s[-1].upper() in mult else int(s)


def worker(rank, world, backend, store, sizes, iters, out):
    torch.set_num_threads(1)
    if backend == "spmd":
        import spmd_torch  # noqa: F401
    dist.init_process_group(backend, init_method="file://" + store, rank=rank, world_size=world)
    res = []
    for b in sizes:
        x = torch.ones(max(1, b // 4))
        for _ in range(5):
            dist.all_reduce(x)
        n = iters or max(5, min(2000, int(0.2 / max(1e-6, b / 1e9 + 2e-5))))
        cnt = torch.tensor([n], dtype=torch.int64)
        dist.all_reduce(cnt, op=dist.ReduceOp.MIN)  # every rank runs the same count
        n = int(cnt.item())
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(n):
            dist.all_reduce(x)
        mean = torch.tensor([(time.perf_counter() - t0) / n], dtype=torch.float64)
        dist.all_reduce(mean, op=dist.ReduceOp.MAX)
        res.append(mean.item())
    if rank == 0:
        with open(out, "w") as f:
            f.write(" ".join(repr(v) for v in res))
    dist.destroy_process_group()


def run(world, backend, sizes, iters):
    d = tempfile.mkdtemp(prefix="torch_backend_bench_")
    store, out = os.path.join(d, "store"), os.path.join(d, "out")
    try:
        mp.spawn(worker, args=(world, backend, store, sizes, iters, out), nprocs=world)
        with open(out) as f:
            return [float(v) for v in f.read().split()]
    finally:
        for p in (store, out):
            if os.path.exists(p):
                os.unlink(p)
        os.rmdir(d)


def fmt(sec):
    us = sec * 1e6
    return f"{us:.1f} µs" if us < 1000 else f"{us / 1000:.2f} ms"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worlds", default="2,4")
    ap.add_argument("--min-bytes", default="4")
    ap.add_argument("--max-bytes", default="64M")
    ap.add_argument("--iters", type=int, default=0, help="iterations per size (0: about 0.2 s)")
    a = ap.parse_args()
    sizes = []
    b = parse_bytes(a.min_bytes)
    while b <= parse_bytes(a.max_bytes):
        sizes.append(b)
        b *= 4
    print(f"torch {torch.__version__}, nproc {os.cpu_count()}, float32 SUM all_reduce, "
          "slowest rank's mean")
    for world in (int(w) for w in a.worlds.split(",")):
        spmd = run(world, "spmd", sizes, a.iters)
        gloo = run(world, "gloo", sizes, a.iters)
        print(f"\nworld {world}\n| bytes | torch+spmd | torch+gloo | gloo/spmd |\n|---:|---:|---:|---:|")
        for b, s, g in zip(sizes, spmd, gloo):
            print(f"| {b} | {fmt(s)} | {fmt(g)} | {g / s:.1f}× |", flush=True)


if __name__ == "__main__":
    main()
