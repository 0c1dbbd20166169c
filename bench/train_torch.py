#!/usr/bin/env python3
"""The peer of spmd-train: the seeds' models and recipe in PyTorch, one thread.

  python3 bench/train_torch.py --model cnn --batch-size 16 --steps 300
  python3 bench/train_torch.py --model mlp --batch-size 64 --epochs 1
  python3 bench/train_torch.py --model cnn --batch-size 16 --steps 300 --world-size 2

With --world-size N > 1 the same loop runs in N processes under
DistributedDataParallel with the gloo backend (seed 000's ddp_example): started
by torch.multiprocessing.spawn (torchrun itself fails to start under Debian's
Python 3.11 with torch 1.13), rendezvous through a file store (no port), each
rank on its DistributedSampler shard (the shuffled order cut rank::N, as
torch's sampler does), batch B per rank, one thread per process.  samples/s
then counts all ranks, timed on rank 0 from the step after --warmup to the
end, and the line also gives the mean time of the forward, the backward (with
DDP's overlapped all_reduce) and the optimizer step.

Fashion-MNIST is read from the Debian package's IDX files (no torchvision),
normalised with mean 0.2860 std 0.3530 and held in memory as one tensor; a
batch is gathered by index from a shuffled permutation, so the loop measures
the model and the optimizer, not a DataLoader.  Prints one line:
  torch <model> batch <B>: <samples/s> samples/s over <N> steps (<seconds> s); per step:
  forward <ms>, backward <ms>, optimizer <ms>[, test accuracy <a>]
samples/s is measured after --warmup steps, and so are the mean times per
step of the forward (with the loss), the backward and the optimizer step.
"""
import argparse
import gzip
import os
import struct
import sys
import time

# One thread for everything torch may call: torch.set_num_threads(1) covers
# OpenMP and oneDNN, but OpenBLAS (used for Linear layers by Debian's torch)
# keeps its own pool sized to the machine unless told before it loads.
for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

MEAN, STD = 0.2860, 0.3530


def load_idx(path):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rb") as f:
        data = f.read()
    zero, dtype, ndim = struct.unpack(">HBB", data[:4])
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def find(dirname, base):
    for name in (base, base + ".gz"):
        p = os.path.join(dirname, name)
        if os.path.exists(p):
            return p
    sys.exit("train_torch.py: %s not found in %s" % (base, dirname))


def load_split(dirname, prefix):
    x = load_idx(find(dirname, prefix + "-images-idx3-ubyte"))
    y = load_idx(find(dirname, prefix + "-labels-idx1-ubyte"))
    x = (torch.from_numpy(x.astype(np.float32)) / 255.0 - MEAN) / STD
    return x.unsqueeze(1).contiguous(), torch.from_numpy(y.astype(np.int64))


class MLP(nn.Module):       # seed 003
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x.reshape(x.shape[0], -1))))


class Net(nn.Module):       # seed 000
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 32, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(4608, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = self.dropout2(x)
        return self.fc2(x)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="cnn", choices=["mlp", "cnn"])
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--steps", type=int, default=0, help="stop after this many steps (0: epochs)")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--momentum", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--eval", action="store_true", help="report test accuracy at the end")
    ap.add_argument("--world-size", type=int, default=1, help="DDP processes (gloo)")
    ap.add_argument("--bucket-cap-mb", type=float, default=25.0, help="DDP bucket cap")
    ap.add_argument("--backend", default="gloo",
                    help="torch.distributed backend of DDP: gloo, or spmd (bindings/torch's "
                         "spmd_torch on PYTHONPATH)")
    a = ap.parse_args()
    if a.world_size > 1:
        import tempfile
        import torch.multiprocessing as mp
        fd, store = tempfile.mkstemp(prefix="train_torch_store_")
        os.close(fd)
        os.unlink(store)   # the file store creates it
        try:
            mp.spawn(worker, args=(a, store), nprocs=a.world_size, join=True)
        finally:
            if os.path.exists(store):
                os.unlink(store)
        return
    worker(0, a, None)


def worker(rank, a, store):
    ddp = a.world_size > 1
    if ddp:
        import torch.distributed as dist
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        if a.backend == "spmd":
            import spmd_torch  # noqa: F401  registers the backend
        dist.init_process_group(a.backend, init_method="file://" + store, rank=rank,
                                world_size=a.world_size)
    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    xs, ys = load_split(a.data, "train")
    model = MLP() if a.model == "mlp" else Net()
    if ddp:
        # broadcasts rank 0's parameters, as spmd's reducer does
        model = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=a.bucket_cap_mb)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    B = a.batch_size
    W = a.world_size
    steps = 0
    timed = 0
    t0 = None
    tf = tb = to = 0.0
    model.train()
    done = False
    gen = torch.Generator()
    for epoch in range(a.epochs if a.steps == 0 else 1 << 30):
        gen.manual_seed(a.seed + epoch)
        perm = torch.randperm(xs.shape[0], generator=gen)
        if ddp:   # DistributedSampler: pad to a multiple of W, then rank::W
            pad = (-len(perm)) % W
            perm = torch.cat([perm, perm[:pad]])[rank::W]
        for i in range(0, perm.shape[0], B):
            if steps == a.warmup:
                t0 = time.perf_counter()
                timed = 0
                tf = tb = to = 0.0
            idx = perm[i:i + B]
            x, y = xs[idx], ys[idx]
            c0 = time.perf_counter()
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            c1 = time.perf_counter()
            loss.backward()
            c2 = time.perf_counter()
            opt.step()
            c3 = time.perf_counter()
            tf += c1 - c0
            tb += c2 - c1
            to += c3 - c2
            steps += 1
            timed += len(idx) * W
            if a.steps and steps >= a.steps:
                done = True
                break
        if done:
            break
    dt = time.perf_counter() - t0 if t0 is not None else float("nan")
    n = max(steps - a.warmup, 1)
    line = "torch %s batch %d: %.0f samples/s over %d steps (%.2f s); per step: forward %.3f ms, " \
           "backward %.3f ms, optimizer %.3f ms" % (a.model, B, timed / dt, steps - a.warmup, dt,
                                                   1e3 * tf / n, 1e3 * tb / n, 1e3 * to / n)
    if ddp:
        line = "torch DDP (%s, world %d) %s batch %d per rank: %.0f samples/s over %d steps " \
               "(%.2f s); per step: forward %.3f ms, backward+all_reduce %.3f ms, optimizer %.3f ms" % (
                   a.backend, W, a.model, B, timed / dt, steps - a.warmup, dt, 1e3 * tf / n, 1e3 * tb / n,
                   1e3 * to / n)
    if a.eval:
        xt, yt = load_split(a.data, "t10k")
        model.eval()
        with torch.no_grad():
            correct = sum(int((model(xt[i:i + 1000]).argmax(1) == yt[i:i + 1000]).sum())
                          for i in range(0, xt.shape[0], 1000))
        line += ", test accuracy %.4f" % (correct / xt.shape[0])
    if rank == 0:
        print(line, flush=True)
    if ddp:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
