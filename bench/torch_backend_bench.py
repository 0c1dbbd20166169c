#!/usr/bin/env python3
"""torch.distributed all_reduce (or all_gather, reduce_scatter) on the spmd
backend against gloo, same run.

  PYTHONPATH=build/python python3 bench/torch_backend_bench.py [--worlds 2,4]
      [--min-bytes 4] [--max-bytes 64M] [--iters N]
      [--op all_reduce|all_gather|reduce_scatter]

For each world size, spawns that many processes (one thread each) holding
both a gloo group (the default group, file store) and an spmd group over the
same ranks (new_group(backend="spmd")), and times float32 SUM dist.all_reduce
(in place, blocking, as user code calls it) at sizes x4 from min to max
bytes: 5 warm-ups, then --reps rounds alternating the backends, each round
iterations sized to about 0.1 s (at least 5) and timed as the slowest rank's
mean; the best round of each backend is kept (the machine is shared: this
takes the least disturbed).  all_gather is all_gather_into_tensor and
reduce_scatter reduce_scatter_tensor (SUM), bytes being each rank's input
and output respectively.  Prints one table per world: bytes, spmd, gloo,
gloo/spmd ("-" where gloo refuses the operation)."""
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


def make_op(op, nbytes, world):
    """The operation to time on `nbytes` per rank, as fn(group)."""
    x = torch.ones(max(1, nbytes // 4))
    if op == "all_reduce":
        return lambda g: dist.all_reduce(x, group=g)
    if op == "all_gather":
        out = torch.empty(x.numel() * world)
        return lambda g: dist.all_gather_into_tensor(out, x, group=g)
    if op == "reduce_scatter":
        big = torch.ones(x.numel() * world)
        return lambda g: dist.reduce_scatter_tensor(x, big, group=g)
    raise SystemExit(f"unknown --op {op}")


def timed(fn, group, n):
    dist.barrier(group=group)
    t0 = time.perf_counter()
    for _ in range(n):
        fn(group)
    mean = torch.tensor([(time.perf_counter() - t0) / n], dtype=torch.float64)
    dist.all_reduce(mean, op=dist.ReduceOp.MAX, group=group)
    return mean.item()


def worker(rank, world, store, sizes, iters, reps, out, op):
    torch.set_num_threads(1)
    import spmd_torch  # noqa: F401
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=world)
    groups = {"gloo": None, "spmd": dist.new_group(backend="spmd")}
    res = {"gloo": [], "spmd": []}
    refused = set()
    for b in sizes:
        fn = make_op(op, b, world)
        for k, g in groups.items():
            for _ in range(5):
                try:
                    fn(g)
                except RuntimeError:  # the backend lacks the operation (same on every rank)
                    refused.add(k)
                    break
        n = iters or max(5, min(2000, int(0.1 / max(1e-6, b / 1e9 + 2e-5))))
        best = {k: float("inf") if k not in refused else float("nan") for k in groups}
        for _ in range(reps):  # alternate, keep each backend's best round
            for k, g in groups.items():
                if k not in refused:
                    best[k] = min(best[k], timed(fn, g, n))
        for k in groups:
            res[k].append(best[k])
    if rank == 0:
        with open(out, "w") as f:
            for k in ("spmd", "gloo"):
                f.write(" ".join(repr(v) for v in res[k]) + "\n")
    dist.destroy_process_group()


def run(world, sizes, iters, reps, op):
    d = tempfile.mkdtemp(prefix="torch_backend_bench_")
    store, out = os.path.join(d, "store"), os.path.join(d, "out")
    try:
        mp.spawn(worker, args=(world, store, sizes, iters, reps, out, op), nprocs=world)
        with open(out) as f:
            spmd, gloo = ([float(v) for v in line.split()] for line in f.read().splitlines())
            return spmd, gloo
    finally:
        for p in (store, out):
            if os.path.exists(p):
                os.unlink(p)
        os.rmdir(d)


def fmt(sec):
    if sec != sec:
        return "-"
    us = sec * 1e6
    return f"{us:.1f} µs" if us < 1000 else f"{us / 1000:.2f} ms"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worlds", default="2,4")
    ap.add_argument("--min-bytes", default="4")
    ap.add_argument("--max-bytes", default="64M")
    ap.add_argument("--iters", type=int, default=0, help="iterations per round (0: about 0.1 s)")
    ap.add_argument("--reps", type=int, default=3, help="rounds per size and backend (best kept)")
    ap.add_argument("--op", default="all_reduce", choices=("all_reduce", "all_gather", "reduce_scatter"))
    a = ap.parse_args()
    sizes = []
    b = parse_bytes(a.min_bytes)
    while b <= parse_bytes(a.max_bytes):
        sizes.append(b)
        b *= 4
    print(f"torch {torch.__version__}, nproc {os.cpu_count()}, float32 {a.op}, "
          "slowest rank's mean")
    for world in (int(w) for w in a.worlds.split(",")):
        spmd, gloo = run(world, sizes, a.iters, a.reps, a.op)
        print(f"\nworld {world}\n| bytes | torch+spmd | torch+gloo | gloo/spmd |\n|---:|---:|---:|---:|")
        for b, s, g in zip(sizes, spmd, gloo):
            ratio = f"{g / s:.1f}×" if g == g else "-"
            print(f"| {b} | {fmt(s)} | {fmt(g)} | {ratio} |", flush=True)


if __name__ == "__main__":
    main()
