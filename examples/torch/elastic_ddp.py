#!/usr/bin/env python3
"""DDP that goes on in place when a rank is killed, and takes a replacement
in (spmd_torch.elastic).

    spmdrun --standalone --nproc-per-node 3 --on-failure shrink \\
        python3 examples/torch/elastic_ddp.py --steps 40 --kill-rank 2 --kill-at-step 10

Each rank trains the same small regression model on its own shard of a fixed
synthetic data set.  With --kill-rank, that rank SIGKILLs itself (a real,
unannounced death) in the middle of step --kill-at-step, after its forward
and before its gradients are reduced; the others see the reduction fail
(RanksFailed), shrink to a group of the survivors, agree on the state and
go on.  Any rank may die, rank 0 included.  Under --on-failure replace
(SPMD_ON_FAILURE=replace) spmdrun starts a new process in the dead one's
place (SPMD_JOIN=1): the survivors wait for it and grow back, and it
receives the model live from them.  The new group is torch's default group,
so the loop uses no group= at all.  At the end every rank checks that the
replicas' parameters are equal (bit for bit) and prints one line.
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

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    if elastic.joining():  # a replacement: the state comes from the running ranks
        el = elastic.Elastic(model.state_dict(), join=True)
        me = f"joiner {os.getpid()}"
        print(f"{me}: joined as rank {dist.get_rank()} of {dist.get_world_size()} after step {el.steps}",
              flush=True)
    else:
        dist.init_process_group("spmd")
        el = elastic.Elastic(model.state_dict())
        me = f"rank {dist.get_rank()}"
    ddp = DDP(model)
    recoveries = replacements = 0
    while el.steps < args.steps:
        step = el.steps
        try:
            # Processes waiting to join: the replacements spmdrun starts, or
            # any (one 4-byte broadcast per step).
            joiners = replacements or el.joiners_waiting()
            if joiners:
                el.grow(joiners)  # they get the state; world += joiners
                replacements = 0
                ddp = DDP(model)
                print(f"{me}: {joiners} joined: world {dist.get_world_size()}", flush=True)
                continue  # where the joiners start: their DDP(), then this check
            with el.step():
                opt.zero_grad()
                x, y = batch(step, dist.get_rank(), dist.get_world_size())
                loss = torch.nn.functional.mse_loss(ddp(x), y)
                if me == f"rank {args.kill_rank}" and step == args.kill_at_step:
                    os.kill(os.getpid(), signal.SIGKILL)
                loss.backward()
                opt.step()
        except elastic.RanksFailed as e:
            print(f"{me}: step {step}: {e.failed_ranks} failed; recovering", flush=True)
            old, pg = el.process_group, el.recover()
            if args.check_old_group:
                try:
                    old.allreduce([torch.zeros(1)], dist.AllreduceOptions()).wait()
                    print(f"{me}: the replaced group still ran an all_reduce", flush=True)
                except RuntimeError as refused:
                    print(f"{me}: the replaced group refuses: {refused}".splitlines()[0], flush=True)
            info = el.last_recovery()
            recoveries += 1
            print(f"{me}: world {info['world_before']} -> {info['world_after']}, "
                  f"steps redone {info['steps_lost']}, {info['seconds']:.3f} s", flush=True)
            if os.environ.get("SPMD_ON_FAILURE") == "replace":  # spmdrun starts one per lost rank
                replacements = info["world_before"] - info["world_after"]
            ddp = DDP(model)

    # The replicas' parameters, bit for bit: rank 0's against each rank's,
    # on torch's default group (the last recovery's or grow's).
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    ref = flat.clone()
    dist.barrier()
    dist.broadcast(ref, 0)
    same = torch.tensor([1 if torch.equal(flat, ref) else 0], dtype=torch.int32)
    dist.all_reduce(same, op=dist.ReduceOp.MIN)
    ones = torch.ones(1)
    dist.all_reduce(ones)
    ok = bool(same.item()) and int(ones.item()) == dist.get_world_size()
    print(f"{me}: {el.steps} steps at world {dist.get_world_size()} after {recoveries} recoveries; "
          f"replicas' parameters {'equal' if same.item() else 'DIFFER'}; "
          f"all_reduce of ones {int(ones.item())}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
