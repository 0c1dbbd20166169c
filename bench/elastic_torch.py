#!/usr/bin/env python3
"""The torch way of surviving a lost rank, for bench/elastic_bench.sh: the
seed CNN (bench/train_torch.py's Net and data) under DistributedDataParallel
(gloo), one thread per process, checkpointing every --ckpt-every steps, run by
  torchrun --standalone --nproc-per-node 4 --max-restarts 1 bench/elastic_torch.py ...
On the first attempt (TORCHELASTIC_RESTART_COUNT 0) rank --kill-rank SIGKILLs
itself as step --kill-at begins; torchrun then stops every worker and starts
them all again, and they resume from the last checkpoint.  Printed (rank 0):
  kill <wall time> step <S>
  resumed <wall time> from step <C> (steps redone <S - 1 - C>)
  done steps <N> test accuracy <a>
The wall times are comparable with spmd-train's (CLOCK_REALTIME).
With --elastic the same program runs on the spmd backend under
  spmdrun --standalone --nproc-per-node 4 --on-failure shrink python3 bench/elastic_torch.py --elastic ...
through spmd_torch.elastic: the survivors recover in place (no checkpoint, no
restart) and print (their new rank 0) "resumed <wall time> from step <C>
(steps redone <R>)" once DDP is rebuilt on the new group; the remaining steps are
dealt over the smaller world (the step count stays the 4-rank one)."""
import argparse
import os
import signal
import sys
import time

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from train_torch import Net, load_split  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--ckpt-dir", required=True)
    ap.add_argument("--ckpt-every", type=int, default=100)
    ap.add_argument("--kill-rank", type=int, default=0)
    ap.add_argument("--kill-at", type=int, default=0, help="global step (1-based); 0: no kill")
    ap.add_argument("--elastic", action="store_true", help="spmd backend, spmd_torch.elastic recovery")
    a = ap.parse_args()
    torch.set_num_threads(1)
    if a.elastic:
        return elastic_main(a)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    torch.manual_seed(a.seed)
    x, y = load_split(a.data, "train")
    tx, ty = load_split(a.data, "t10k")
    model = torch.nn.parallel.DistributedDataParallel(Net())
    opt = torch.optim.SGD(model.parameters(), lr=a.lr)
    ckpt = os.path.join(a.ckpt_dir, "ckpt.pt")
    step = 0
    if os.path.exists(ckpt):
        st = torch.load(ckpt)
        model.module.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        step = st["step"]
    if attempt > 0 and rank == 0:
        print("resumed %.6f from step %d" % (time.time(), step), flush=True)
    n = x.shape[0]
    per_rank = (n + world - 1) // world
    steps_per_epoch = (per_rank + a.batch_size - 1) // a.batch_size
    total = steps_per_epoch * a.epochs
    while step < total:
        epoch, k = divmod(step, steps_per_epoch)
        g = torch.Generator()
        g.manual_seed(a.seed + epoch)
        order = torch.randperm(n, generator=g)
        order = torch.cat([order, order[: per_rank * world - n]])[rank::world]
        idx = order[k * a.batch_size:(k + 1) * a.batch_size]
        if attempt == 0 and rank == a.kill_rank and step + 1 == a.kill_at:
            print("kill %.6f step %d" % (time.time(), step + 1), flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        model.train()
        opt.zero_grad()
        F.cross_entropy(model(x[idx]), y[idx]).backward()
        opt.step()
        step += 1
        if step % a.ckpt_every == 0 and rank == 0:
            tmp = ckpt + ".tmp"
            torch.save({"model": model.module.state_dict(), "opt": opt.state_dict(), "step": step}, tmp)
            os.replace(tmp, ckpt)
        if step % a.ckpt_every == 0:
            dist.barrier()  # the checkpoint is whole before anyone goes on
    model.eval()
    with torch.no_grad():
        correct = sum(int((model(tx[i:i + 1000]).argmax(1) == ty[i:i + 1000]).sum()) for i in range(0, tx.shape[0], 1000))
    if rank == 0:
        print("done steps %d test accuracy %.4f" % (step, correct / tx.shape[0]), flush=True)
    dist.destroy_process_group()


def elastic_main(a):
    import spmd_torch.elastic as elastic
    dist.init_process_group("spmd")
    start_rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(a.seed)
    x, y = load_split(a.data, "train")
    tx, ty = load_split(a.data, "t10k")
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=a.lr)
    el = elastic.Elastic(net.state_dict())
    pg = el.process_group
    model = torch.nn.parallel.DistributedDataParallel(net, process_group=pg)
    n = x.shape[0]
    total = (((n + world - 1) // world + a.batch_size - 1) // a.batch_size) * a.epochs
    while el.steps < total:
        step, rank, world = el.steps, pg.rank(), pg.size()
        per_rank = (n + world - 1) // world
        epoch, k = divmod(step, (per_rank + a.batch_size - 1) // a.batch_size)
        g = torch.Generator()
        g.manual_seed(a.seed + epoch)
        order = torch.randperm(n, generator=g)
        order = torch.cat([order, order[: per_rank * world - n]])[rank::world]
        idx = order[k * a.batch_size:(k + 1) * a.batch_size]
        if start_rank == a.kill_rank and step + 1 == a.kill_at:
            print("kill %.6f step %d" % (time.time(), step + 1), flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            with el.step():
                model.train()
                opt.zero_grad()
                F.cross_entropy(model(x[idx]), y[idx]).backward()
                opt.step()
        except elastic.RanksFailed:
            pg = el.recover()
            model = torch.nn.parallel.DistributedDataParallel(net, process_group=pg)
            if pg.rank() == 0:  # ready for the next step, as torchrun's resumed workers are
                print("resumed %.6f from step %d (steps redone %d)"
                      % (time.time(), el.steps, el.last_recovery()["steps_lost"]), flush=True)
    net.eval()
    with torch.no_grad():
        correct = sum(int((net(tx[i:i + 1000]).argmax(1) == ty[i:i + 1000]).sum()) for i in range(0, tx.shape[0], 1000))
    if pg.rank() == 0:
        print("done steps %d test accuracy %.4f" % (el.steps, correct / tx.shape[0]), flush=True)


if __name__ == "__main__":
    main()
