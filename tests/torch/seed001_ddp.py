"""Seed 001's DDP programs on spmd (world 2, torchrun or spmdrun): the
nn.Linear DDP example, checkpoint save on rank 0 + barrier + load on every
rank, Join with uneven inputs, and SyncBatchNorm's synchronisation.
Changed: the backend name, CPU instead of device ids, the checkpoint path made
unique per run (shared with broadcast_object_list)."""
import os
import tempfile

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.optim as optim
from torch.distributed.algorithms.join import Join
from torch.nn.parallel import DistributedDataParallel as DDP

import spmd_torch  # noqa: F401


def example(rank, world_size):
    model = nn.Linear(10, 10)
    ddp_model = DDP(model)
    loss_fn = nn.MSELoss()
    optimizer = optim.SGD(ddp_model.parameters(), lr=0.001)

    outputs = ddp_model(torch.randn(20, 10))
    labels = torch.randn(20, 10)
    loss_fn(outputs, labels).backward()
    optimizer.step()
    return ddp_model


def checkpoint(rank, ddp_model):
    path = [tempfile.mkdtemp() + "/model.checkpoint" if rank == 0 else None]
    dist.broadcast_object_list(path, src=0)
    CHECKPOINT_PATH = path[0]
    if rank == 0:
        # All processes should see same parameters as they all start from same
        # random parameters and gradients are synchronized in backward passes.
        # Therefore, saving it in one process is sufficient.
        torch.save(ddp_model.state_dict(), CHECKPOINT_PATH)

    # Use a barrier() to make sure that process 1 loads the model after process
    # saves it.
    dist.barrier()
    state_dict = torch.load(CHECKPOINT_PATH, map_location="cpu")
    ddp_model.load_state_dict(state_dict)
    for name, p in ddp_model.state_dict().items():
        assert torch.equal(p, state_dict[name])
    dist.barrier()  # everyone has read it
    if rank == 0:
        os.remove(CHECKPOINT_PATH)
        os.rmdir(os.path.dirname(CHECKPOINT_PATH))


def join_uneven(rank):
    # The Join tutorial: rank r has 5 + r inputs; the ranks that finish early
    # shadow the others' all-reduces until everyone is done.
    model = DDP(nn.Linear(1, 1))
    inputs = [torch.tensor([1.0]) for _ in range(5 + rank)]
    num_inputs = 0
    with Join([model]):
        for inp in inputs:
            num_inputs += 1
            loss = model(inp).sum()
            loss.backward()
    print(f"Rank {rank} has exhausted all {num_inputs} of its inputs!")
    assert num_inputs == 5 + rank


def sync_batchnorm(rank, world_size):
    # torch 1.13's SyncBatchNorm runs on CUDA tensors only (its forward raises
    # for CPU input whatever the backend), so this checks the synchronisation it
    # performs — per-rank mean/invstd/count gathered with _all_gather_base and
    # combined — against BatchNorm over the whole batch.
    model = nn.SyncBatchNorm.convert_sync_batchnorm(nn.Sequential(nn.Conv2d(2, 3, 1), nn.BatchNorm2d(3)))
    assert isinstance(model[1], nn.SyncBatchNorm)
    torch.manual_seed(0)
    full = torch.randn(4 * world_size, 3, 5, 5)
    x = full[4 * rank:4 * rank + 4]
    mean, var = x.mean(dim=(0, 2, 3)), x.var(dim=(0, 2, 3), unbiased=False)
    invstd = torch.rsqrt(var + 1e-5)
    count = torch.full((1,), x.numel() // x.size(1), dtype=x.dtype)
    combined = torch.cat([mean, invstd, count])
    flat = torch.empty(world_size * combined.numel())
    dist._all_gather_base(flat, combined)
    m, s, c = torch.split(flat.view(world_size, -1), [3, 3, 1], dim=1)
    gmean = (m * c).sum(0) / c.sum()
    gvar = ((1 / s ** 2 - 1e-5 + (m - gmean) ** 2) * c).sum(0) / c.sum()
    y = (x - gmean[None, :, None, None]) / torch.sqrt(gvar + 1e-5)[None, :, None, None]
    ref = nn.functional.batch_norm(full, None, None, training=True)[4 * rank:4 * rank + 4]
    assert torch.allclose(y, ref, atol=1e-4), "synchronised batch norm differs"


if __name__ == "__main__":
    dist.init_process_group("spmd")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    ddp_model = example(rank, world_size)
    checkpoint(rank, ddp_model)
    join_uneven(rank)
    sync_batchnorm(rank, world_size)
    dist.destroy_process_group()
    print(f"rank {rank}: seed 001 DDP programs ok", flush=True)
