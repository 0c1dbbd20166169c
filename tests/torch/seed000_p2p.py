"""Seed 000's first programs on spmd: barrier ordering (4 processes),
ping-pong, blocking send/recv and isend/irecv (2 processes), each started with
torch.multiprocessing.Process as in the seed.  Changed: the backend name
("spmd", after `import spmd_torch`), a free port, the sleep cut from 5 s to
0.2 s, and assertions on what the seed prints."""
import os
import random  # noqa: F401  (the seed's port choice is replaced by a free port)
import sys
import time

import torch
import torch.distributed as dist
from torch.multiprocessing import Process

import spmd_torch  # noqa: F401
from seed_util import free_port


def init_process(rank, size, fn, master_port, backend='spmd'):
    """ Initialize the distributed environment. """
    os.environ['MASTER_ADDR'] = '127.0.0.1'
    os.environ['MASTER_PORT'] = str(master_port)
    dist.init_process_group(backend, rank=rank, world_size=size)
    fn(rank, size)
    # Added: rank 0 hosts torch's store, which torch 1.13's start-up barrier
    # polls; with a fast backend rank 0 could finish and exit while another
    # rank is still polling it ("Connection reset by peer").
    dist.barrier()


torch.set_num_threads(1)


def run(rank, size):
    """ Distributed function to be implemented later. """
    if rank != 0:
        dist.barrier()
    print(f'Started {rank}', flush=True)
    if rank == 0:
        dist.barrier()


def run_pingpong(rank, size, num_iter=10):
    """ P1 prints 'ping', P2 prints 'pong', strictly alternating. """
    ball = torch.zeros(1)
    for i in range(num_iter):
        if rank == 0:
            print('ping', flush=True)
            ball += 1
            dist.send(ball, dst=1)
            dist.recv(ball, src=1)
            assert ball.item() == 2 * i + 2
        else:
            dist.recv(ball, src=0)
            assert ball.item() == 2 * i + 1
            print('pong', flush=True)
            ball += 1
            dist.send(ball, dst=0)


def run_sendrecv(rank, size):
    tensor = torch.zeros(1)+int(rank==0)
    print('Rank ', rank, ' has data ', tensor[0], flush=True)
    if rank == 0:
        # Send the tensor to process 1
        dist.send(tensor=tensor, dst=1)
    else:
        # Receive tensor from process 0
        dist.recv(tensor=tensor, src=0)
    print('Rank ', rank, ' has data ', tensor[0], flush=True)
    assert tensor[0] == 1


def run_isendrecv(rank, size):
    tensor = torch.zeros(1)
    req = None
    if rank == 0:
        tensor += 1
        # Send the tensor to process 1
        time.sleep(0.2)
        req = dist.isend(tensor=tensor, dst=1)
        print('Rank 0 started sending')
    else:
        # Receive tensor from process 0
        req = dist.irecv(tensor=tensor, src=0)
        print('Rank 1 started receiving')
        assert not req.is_completed()  # rank 0 is still asleep: the receive is pending

    print('Rank ', rank, ' has data ', tensor[0])
    req.wait()
    print('Rank ', rank, ' has data ', tensor[0])
    assert tensor[0] == 1


def launch(fn, size):
    processes = []
    port = free_port()
    for rank in range(size):
        p = Process(target=init_process, args=(rank, size, fn, port))
        p.start()
        processes.append(p)

    for p in processes:
        p.join()
    codes = [p.exitcode for p in processes]
    assert codes == [0] * size, f"{fn.__name__}: exit codes {codes}"


if __name__ == "__main__":
    launch(run, 4)
    launch(run_pingpong, 2)
    launch(run_sendrecv, 2)
    launch(run_isendrecv, 2)
    print("seed 000 p2p programs ok")
    sys.exit(0)
