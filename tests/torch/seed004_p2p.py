"""Seed 004's programs on spmd: send_receive, broadcast / reduce / all_reduce
built from send and recv with their tests, and the one-parameter model
(param 2.0 -> 1.4 after one SGD step at world 2).  Started by mp.spawn as in
the seed, or by torchrun / spmdrun (RANK set).  Changed: the backend name,
CPU tensors, a free port instead of 12345; the seed's `tests` module is not
given, so its tests are written here (every rank and every root)."""
import os
import sys
from typing import Literal

import torch as t
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import Tensor

import spmd_torch  # noqa: F401
from seed_util import free_port


def send_receive(rank, world_size):
    if rank == 0:
        # Send tensor to rank 1
        sending_tensor = t.zeros(1)
        print(f"{rank=}, sending {sending_tensor=}")
        dist.send(tensor=sending_tensor, dst=1)
    elif rank == 1:
        # Receive tensor from rank 0
        received_tensor = t.ones(1)
        print(f"{rank=}, creating {received_tensor=}")
        dist.recv(
            received_tensor, src=0
        )  # this line overwrites the tensor's data with our `sending_tensor`
        print(f"{rank=}, received {received_tensor=}")
        assert received_tensor.item() == 0.0


def broadcast(tensor: Tensor, rank: int, world_size: int, src: int = 0):
    """
    Broadcast averaged gradients from rank 0 to all other ranks.
    """
    if rank == src:
        for other_rank in range(world_size):
            if other_rank != src:
                dist.send(tensor, dst=other_rank)
    else:
        received_tensor = t.zeros_like(tensor)
        dist.recv(received_tensor, src=src)
        tensor.copy_(received_tensor)


def reduce(tensor, rank, world_size, dst=0, op: Literal["sum", "mean"] = "sum"):
    """
    Reduces gradients to rank dst, so this process contains the sum or mean of all tensors across
    processes.
    """
    if rank != dst:
        dist.send(tensor, dst=dst)
    else:
        for other_rank in range(world_size):
            if other_rank != dst:
                received_tensor = t.zeros_like(tensor)
                dist.recv(received_tensor, src=other_rank)
                tensor += received_tensor
    if op == "mean":
        tensor /= world_size


def all_reduce(tensor, rank, world_size, op: Literal["sum", "mean"] = "sum"):
    """
    Allreduce the tensor across all ranks, using 0 as the initial gathering rank.
    """
    reduce(tensor, rank, world_size, dst=0, op=op)
    broadcast(tensor, rank, world_size, src=0)


def test_broadcast(rank, world_size):
    for src in range(world_size):
        tensor = t.tensor([float(rank)])
        broadcast(tensor, rank, world_size, src=src)
        assert tensor.item() == src, f"rank {rank}: broadcast from {src} gave {tensor}"


def test_reduce(rank, world_size):
    total = float(sum(range(world_size)))
    for dst in range(world_size):
        for op, want in (("sum", total), ("mean", total / world_size)):
            tensor = t.tensor([float(rank)])
            reduce(tensor, rank, world_size, dst=dst, op=op)
            if rank == dst:
                assert tensor.item() == want, f"reduce {op} to {dst} gave {tensor}"


def test_all_reduce(rank, world_size):
    total = float(sum(range(world_size)))
    for op, want in (("sum", total), ("mean", total / world_size)):
        tensor = t.tensor([float(rank)])
        all_reduce(tensor, rank, world_size, op=op)
        assert tensor.item() == want, f"rank {rank}: all_reduce {op} gave {tensor}"
        # and what torch's own all_reduce gives on this backend
        ref = t.tensor([float(rank)])
        dist.all_reduce(ref)
        assert ref.item() == total


class SimpleModel(t.nn.Module):
    def __init__(self):
        super(SimpleModel, self).__init__()
        self.param = t.nn.Parameter(t.tensor([2.0]))

    def forward(self, x: Tensor):
        return x - self.param


def run_simple_model(rank, world_size):
    model = SimpleModel()
    optimizer = t.optim.SGD(model.parameters(), lr=0.1)
    input = t.tensor([rank], dtype=t.float32)
    output = model(input)
    loss = output.pow(2).sum()
    loss.backward()  # Each rank has separate gradients at this point
    print(f"Rank {rank}, before all_reduce, grads: {model.param.grad=}")
    all_reduce(model.param.grad, rank, world_size)  # Synchronize gradients
    print(
        f"Rank {rank}, after all_reduce, synced grads (summed over processes): {model.param.grad=}"
    )
    optimizer.step()  # Step with the optimizer (this will update all models the same way)
    print(f"Rank {rank}, new param: {model.param.data}")
    if world_size == 2:
        assert abs(model.param.item() - 1.4) < 1e-6, model.param


def worker(rank, world_size):
    dist.init_process_group(backend="spmd", rank=rank, world_size=world_size)
    send_receive(rank, world_size)
    test_broadcast(rank, world_size)
    test_reduce(rank, world_size)
    test_all_reduce(rank, world_size)
    run_simple_model(rank, world_size)
    dist.destroy_process_group()


if __name__ == "__main__":
    if "RANK" in os.environ:  # started by torchrun / spmdrun
        worker(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
        sys.exit(0)
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = str(free_port())
    world_size = 2  # simulate 2 processes
    mp.spawn(
        worker,
        args=(world_size,),
        nprocs=world_size,
        join=True,
    )
