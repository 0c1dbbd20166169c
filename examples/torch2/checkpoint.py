"""torch.distributed.checkpoint on CPU over spmd: an FSDP model and its
optimizer saved by every rank (each writes its own shards, rank 0 the
metadata), then loaded into a fresh model.

    spmdrun --standalone --nproc-per-node 4 python3 examples/torch2/checkpoint.py DIR
    torchrun --nproc-per-node 4 examples/torch2/checkpoint.py DIR
"""
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

import spmd_torch  # noqa: F401  registers the "spmd" backend


def make(seed):
    torch.manual_seed(seed)
    # on a device mesh, FSDP's sharded state dicts hold DTensors (which may
    # have an empty shard on some rank; ShardedTensors may not)
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    model = FSDP(nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 2)),
                 device_id=torch.device("cpu"), device_mesh=mesh)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    return model, opt


def demo(path):
    model, opt = make(0)
    model(torch.randn(4, 8)).sum().backward()
    opt.step()  # the optimizer has state worth saving
    msd, osd = get_state_dict(model, opt)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=path)

    fresh, fresh_opt = make(1)  # other weights, no optimizer state
    msd2, osd2 = get_state_dict(fresh, fresh_opt)
    state = {"model": msd2, "optim": osd2}
    dcp.load(state, checkpoint_id=path)  # fills the state dicts in place
    set_state_dict(fresh, fresh_opt, model_state_dict=state["model"],
                   optim_state_dict=state["optim"])
    with FSDP.summon_full_params(model), FSDP.summon_full_params(fresh):
        same = all(torch.equal(a, b) for a, b in zip(model.parameters(), fresh.parameters()))
    if dist.get_rank() == 0:
        print(f"saved to and loaded from {path}: parameters equal: {same}", flush=True)
    return model, opt, fresh, fresh_opt


if __name__ == "__main__":
    dist.init_process_group("spmd")
    demo(sys.argv[1] if len(sys.argv) > 1 else "checkpoint")
    dist.destroy_process_group()
