#!/usr/bin/env python3
"""The peer of spmd-train: the seeds' models and recipe in PyTorch, one thread.

  python3 bench/train_torch.py --model cnn --batch-size 16 --steps 300
  python3 bench/train_torch.py --model mlp --batch-size 64 --epochs 1

Fashion-MNIST is read from the Debian package's IDX files (no torchvision),
normalised with mean 0.2860 std 0.3530 and held in memory as one tensor; a
batch is gathered by index from a shuffled permutation, so the loop measures
the model and the optimizer, not a DataLoader.  Prints one line:
  torch <model> batch <B>: <samples/s> samples/s over <N> steps (<seconds> s)[, test accuracy <a>]
samples/s is measured after --warmup steps.
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
    a = ap.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    xs, ys = load_split(a.data, "train")
    model = MLP() if a.model == "mlp" else Net()
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    B = a.batch_size
    steps = 0
    timed = 0
    t0 = None
    model.train()
    done = False
    for epoch in range(a.epochs if a.steps == 0 else 1 << 30):
        perm = torch.randperm(xs.shape[0])
        for i in range(0, xs.shape[0], B):
            if steps == a.warmup:
                t0 = time.perf_counter()
                timed = 0
            idx = perm[i:i + B]
            x, y = xs[idx], ys[idx]
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            steps += 1
            timed += len(idx)
            if a.steps and steps >= a.steps:
                done = True
                break
        if done:
            break
    dt = time.perf_counter() - t0 if t0 is not None else float("nan")
    line = "torch %s batch %d: %.0f samples/s over %d steps (%.2f s)" % (
        a.model, B, timed / dt, steps - a.warmup, dt)
    if a.eval:
        xt, yt = load_split(a.data, "t10k")
        model.eval()
        with torch.no_grad():
            correct = sum(int((model(xt[i:i + 1000]).argmax(1) == yt[i:i + 1000]).sum())
                          for i in range(0, xt.shape[0], 1000))
        line += ", test accuracy %.4f" % (correct / xt.shape[0])
    print(line, flush=True)


if __name__ == "__main__":
    main()
