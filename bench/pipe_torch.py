#!/usr/bin/env python3
"""The PyTorch 1.13 peer of DP x PP for seed 000's CNN.

  /usr/bin/python3 bench/pipe_torch.py --dp 2 --microbatches 4 --batch-size 32 --steps 60

torch 1.13 has no cross-process pipeline (torch.distributed.pipelining is
2.4+).  Its pipeline is torch.distributed.pipeline.sync.Pipe: one process
holding every partition, each partition on a device, and it needs the RPC
framework initialised.  On a CPU-only machine every partition is on the one
CPU device, so the stages run one after another in the same process.  The
closest equivalent of spmd's DP 2 x PP 2 at world 4 is therefore DP 2 x Pipe
(2 partitions, --microbatches chunks): --dp processes under
DistributedDataParallel (gloo), each wrapping a Pipe of the CNN cut as
spmd's balanced cut does (convolutions | fully connected layers).  One thread
per process; samples/s counts all replicas (global batch = dp x batch-size),
timed on rank 0 after --warmup steps.  Fashion-MNIST from the Debian package.
"""
import argparse
import os
import sys
import tempfile
import time

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import torch
import torch.distributed as dist
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp
import torch.nn as nn
from torch.distributed.pipeline.sync import Pipe

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_torch import load_split  # noqa: E402


def cnn_stages():
    torch.manual_seed(1234)
    s0 = nn.Sequential(nn.Conv2d(1, 32, 3, 1), nn.ReLU(), nn.Conv2d(32, 32, 3, 1), nn.ReLU(),
                       nn.MaxPool2d(2), nn.Dropout(0.25), nn.Flatten(1))
    s1 = nn.Sequential(nn.Linear(4608, 128), nn.ReLU(), nn.Dropout(0.5), nn.Linear(128, 10))
    return nn.Sequential(s0, s1)


def worker(rank, a, store_file, rpc_dir):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + store_file, rank=rank, world_size=a.dp)
    opts = rpc.TensorPipeRpcBackendOptions(init_method="file://" + os.path.join(rpc_dir, "rpc%d" % rank))
    rpc.init_rpc("w%d" % rank, rank=0, world_size=1, rpc_backend_options=opts)   # Pipe's own RPC
    model = Pipe(cnn_stages(), chunks=a.microbatches, checkpoint="never")   # as spmd: no recomputation
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.5)
    x, y = load_split(a.data, "train")
    g = torch.Generator().manual_seed(a.seed)
    perm = torch.randperm(x.shape[0], generator=g)
    B = a.batch_size
    t0 = None
    for s in range(a.steps):
        if s == a.warmup:
            dist.barrier()
            t0 = time.perf_counter()
        idx = perm[((s * a.dp + rank) * B) % (x.shape[0] - B):][:B]
        out = ddp(x[idx]).local_value()
        loss = nn.functional.cross_entropy(out, y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.barrier()
    if rank == 0:
        el = time.perf_counter() - t0
        n = a.steps - a.warmup
        print("torch DDP %d x Pipe(2 partitions, %d chunks), batch %d per replica: %.0f samples/s over %d steps"
              % (a.dp, a.microbatches, B, B * a.dp * n / el, n))
    rpc.shutdown()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dp", type=int, default=2)
    ap.add_argument("--microbatches", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        mp.spawn(worker, args=(a, os.path.join(d, "store"), d), nprocs=a.dp)


if __name__ == "__main__":
    main()
