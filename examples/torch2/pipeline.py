"""torch.distributed.pipelining on CPU over spmd: a 4-layer model split into
one stage per rank, 4 micro-batches per step, under the GPipe schedule (all
forwards, then all backwards) or 1F1B (one forward, one backward).

    spmdrun --standalone --nproc-per-node 4 python3 examples/torch2/pipeline.py [gpipe|1f1b]
    torchrun --nproc-per-node 4 examples/torch2/pipeline.py [gpipe|1f1b]
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

import spmd_torch  # noqa: F401  registers the "spmd" backend

SCHEDULES = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}


def make_layers(n):
    torch.manual_seed(0)  # every rank builds the same model, keeps its layer
    return [nn.Sequential(nn.Linear(8, 8), nn.Tanh()) for _ in range(n)]


def data():
    torch.manual_seed(1)
    return torch.randn(16, 8), torch.randn(16, 8)


def demo(schedule="gpipe", microbatches=4):
    rank, world = dist.get_rank(), dist.get_world_size()
    layer = make_layers(world)[rank]
    stage = PipelineStage(layer, rank, world, torch.device("cpu"))
    sched = SCHEDULES[schedule](stage, n_microbatches=microbatches, loss_fn=nn.functional.mse_loss)
    x, y = data()
    losses = []
    if rank == 0:
        sched.step(x)                      # the first stage feeds the inputs
    elif rank == world - 1:
        sched.step(target=y, losses=losses)  # the last computes the loss
    else:
        sched.step()
    if losses:
        print(f"{schedule}: micro-batch losses " + ", ".join(f"{v.item():.4f}" for v in losses),
              flush=True)
    return layer, losses


if __name__ == "__main__":
    dist.init_process_group("spmd")
    demo(sys.argv[1] if len(sys.argv) > 1 else "gpipe")
    dist.destroy_process_group()
