#!/usr/bin/env python3
"""What spmd_torch's own ProcessGroup (torch 2.x, spmd_torch/_named_group.py:
a Python subclass of torch's, so that the group's backend name is "spmd")
costs per collective, against torch's plain ProcessGroup over the same spmd
backend (what the creator returned before, named "custom").

  PYTHONPATH=build-torch2/python python3 bench/torch_group_cost.py [--iters N] [--rounds R]

One process, world 1 (file:// rendezvous): two spmd groups made by
new_group(backend="spmd"), one with spmd_torch's ProcessGroup, one with
torch's; R rounds alternating the groups, each N calls of a 4-byte
dist.all_reduce, timed by the calling thread's CPU time (time.thread_time:
the per-call Python and dispatch work, not the machine's other load).  The
best round of each is kept; prints both and the difference in µs per call.
torch 2.x only (torch 1.x's group is spmd's C++ ProcessGroup itself)."""
import argparse
import os
import tempfile
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch
import torch.distributed as dist

import spmd_torch


def torch_plain_group(store, backend, timeout=None):
    """torch's own ProcessGroup over backend, as torch wraps a third-party one."""
    pg = dist.ProcessGroup(store, backend.rank(), backend.size())
    custom = dist.ProcessGroup.BackendType.CUSTOM
    pg._set_default_backend(custom)
    pg._register_backend(torch.device("cpu"), custom, backend)
    return pg


def best_round(groups, iters, rounds):
    x = torch.ones(1)
    best = {k: float("inf") for k in groups}
    for r in range(rounds):
        order = list(groups.items()) if r % 2 else list(groups.items())[::-1]
        for k, g in order:
            t0 = time.thread_time()
            for _ in range(iters):
                dist.all_reduce(x, group=g)
            best[k] = min(best[k], (time.thread_time() - t0) / iters)
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--iters", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=40)
    args = ap.parse_args()
    if not spmd_torch._C.backend_api:
        raise SystemExit("torch_group_cost: torch 2.x only (torch 1.x's group is spmd's own)")
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as d:
        dist.init_process_group("spmd", init_method="file://" + os.path.join(d, "rdzv"),
                                rank=0, world_size=1)
        groups = {"spmd_torch's ProcessGroup": dist.new_group(backend="spmd")}
        made_by = spmd_torch._named_group.make
        spmd_torch._named_group.make = torch_plain_group
        try:
            groups["torch's ProcessGroup"] = dist.new_group(backend="spmd")
        finally:
            spmd_torch._named_group.make = made_by
        best = best_round(groups, args.iters, args.rounds)
        dist.destroy_process_group()
    for k, v in best.items():
        print(f"{k:26} {v * 1e6:8.3f} µs per 4-byte all_reduce (thread CPU)")
    mine, theirs = best.values()
    print(f"{'difference':26} {(mine - theirs) * 1e6:8.3f} µs")


if __name__ == "__main__":
    main()
