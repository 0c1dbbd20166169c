"""init_process_group("spmd") with every init_method torch has: env:// (the
launcher tests), tcp://host:port and file:// here, two processes each."""
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import spmd_torch  # noqa: F401
from seed_util import free_port


def worker(rank, world, method):
    dist.init_process_group("spmd", init_method=method, rank=rank, world_size=world)
    t = torch.tensor([rank + 1.0])
    dist.all_reduce(t)
    assert t.item() == world * (world + 1) / 2, t
    sub = dist.new_group([0, 1])  # a subgroup rendezvouses through the same store
    dist.all_reduce(t, group=sub)
    dist.destroy_process_group()


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as d:
        for method in (f"tcp://127.0.0.1:{free_port()}", f"file://{d}/rendezvous"):
            mp.spawn(worker, args=(2, method), nprocs=2)
            print(f"{method.split(':')[0]}:// ok")
    sys.exit(0)
