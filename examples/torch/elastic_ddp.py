#!/usr/bin/env python3
"""DDP that goes on in place when a rank is killed (spmd_torch.elastic).

    spmdrun --standalone --nproc-per-node 3 --on-failure shrink \\
        python3 examples/torch/elastic_ddp.py --steps 40 --kill-rank 2 --kill-at-step 10

Each rank trains the same small regression model on its own shard of a fixed
synthetic data set.  With --kill-rank, that rank SIGKILLs itself (a real,
unannounced death) in the middle of step --kill-at-step, after its forward
and before its gradients are reduced; the others see the reduction fail
(RanksFailed), shrink to a group of the survivors, agree on the state and
go on.  At the end every rank checks that the replicas' parameters are equal
(bit for bit) and prints one line.
"""
import argparse
import os
import signal
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import spmd_torch.elastic as elastic


def batch(step, rank, world):
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(16, 8, generator=g)
    y = x.sum(dim=1, keepdim=True) * 0.5 + 0.1 * world
    return x, y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--kill-rank", type=int, default=-1)
    ap.add_argument("--kill-at-step", type=int, default=10)
    ap.add_argument("--check-old-group", action="store_true",
                    help="after a recovery, check that the replaced group refuses an operation")
    args = ap.parse_args()

    dist.init_process_group("spmd")
    start_rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    el = elastic.Elastic(model.state_dict())
    pg = el.process_group
    ddp = DDP(model, process_group=pg)
    recoveries = 0
    while el.steps < args.steps:
        step = el.steps
        try:
            with el.step():
                opt.zero_grad()
                x, y = batch(step, pg.rank(), pg.size())
                loss = torch.nn.functional.mse_loss(ddp(x), y)
                if start_rank == args.kill_rank and step == args.kill_at_step:
                    os.kill(os.getpid(), signal.SIGKILL)
                loss.backward()
                opt.step()
        except elastic.RanksFailed as e:
            print(f"rank {start_rank}: step {step}: {e.failed_ranks} failed; recovering", flush=True)
            old, pg = pg, el.recover()
            if args.check_old_group:
                try:
                    old.allreduce([torch.zeros(1)], dist.AllreduceOptions()).wait()
                    print(f"rank {start_rank}: the replaced group still ran an all_reduce", flush=True)
                except RuntimeError as refused:
                    print(f"rank {start_rank}: the replaced group refuses: {refused}".splitlines()[0],
                          flush=True)
            ddp = DDP(model, process_group=pg)
            info = el.last_recovery()
            recoveries += 1
            print(f"rank {start_rank}: world {info['world_before']} -> {info['world_after']}, "
                  f"steps redone {info['steps_lost']}, {info['seconds']:.3f} s", flush=True)

    # The replicas' parameters, bit for bit: rank 0's against each rank's.
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    ref = flat.clone()
    pg.broadcast([ref], dist.BroadcastOptions()).wait()
    same = torch.tensor([1 if torch.equal(flat, ref) else 0], dtype=torch.int32)
    opts = dist.AllreduceOptions()
    opts.reduceOp = dist.ReduceOp.MIN
    pg.allreduce([same], opts).wait()
    ok = bool(same.item())
    print(f"rank {start_rank}: {el.steps} steps at world {pg.size()} after {recoveries} recoveries; "
          f"replicas' parameters {'equal' if ok else 'DIFFER'}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
