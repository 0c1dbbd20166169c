#!/usr/bin/env python
"""Seed 000's run_allreduce_spawn.py on spmd: all_reduce over 10 ranks started
by torch.multiprocessing.spawn.  Changed: the backend name, a free port (the
seed's 29500 is fixed), an assertion on the sum."""
import os
from functools import partial
import torch
import torch.distributed as dist

import spmd_torch  # noqa: F401
from seed_util import free_port


def run_allreduce(rank, size):
    tensor = torch.ones(1)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    print('Rank ', rank, ' has data ', tensor[0])
    assert tensor[0] == size


def init_process(rank, size, fn, backend='spmd'):
    """ Initialize the distributed environment. """
    os.environ['MASTER_ADDR'] = '127.0.0.1'
    os.environ['MASTER_PORT'] = os.environ['SEED_PORT']
    dist.init_process_group(backend, rank=rank, world_size=size)
    fn(rank, size)
    # Added: rank 0 hosts torch's store, which torch 1.13's start-up barrier
    # polls; with a fast backend rank 0 could finish and exit while another
    # rank is still polling it ("Connection reset by peer").
    dist.barrier()


if __name__ == "__main__":
    size = 10
    os.environ['SEED_PORT'] = str(free_port())
    fn = partial(init_process, size=size, fn=run_allreduce, backend='spmd')
    torch.multiprocessing.spawn(fn, nprocs=size)
