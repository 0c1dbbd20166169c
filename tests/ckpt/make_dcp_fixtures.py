#!/usr/bin/env python3
"""Make the DCP fixtures under tests/ckpt/fixtures/ with torch's own dcp.save.

Run with torch 2.x (Debian 13's python3-torch 2.6), e.g. from the source tree:
  scripts/torch2-root.sh run -- python3 tests/ckpt/make_dcp_fixtures.py tests/ckpt/fixtures
(the root of issue 24's helper; see docs/DATA.md).  Writes:
  dcp_w1/  world 1: w float32 [4,3] = arange, b bfloat16 [5] = arange/4,
           step int64 scalar = 7, extra.epoch (a Python int: a bytes item)
  dcp_w2/  world 2 (gloo, two processes): w a DTensor sharded on dim 0
           (chunks [0:2] and [2:4]), b replicated (saved once), step = 7,
           extra.epoch = 3
The values are fixed so the C tests can check them.
"""
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp


def state(full=True):
    w = torch.arange(12, dtype=torch.float32).reshape(4, 3)
    b = (torch.arange(5, dtype=torch.float32) / 4).to(torch.bfloat16)
    return {"w": w, "b": b, "step": torch.tensor(7, dtype=torch.int64), "extra": {"epoch": 3}}


def world2(rank, out, initfile):
    dist.init_process_group("gloo", init_method="file://" + initfile, rank=rank, world_size=2)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    mesh = init_device_mesh("cpu", (2,))
    sd = state()
    sd["w"] = distribute_tensor(sd["w"], mesh, [Shard(0)])
    dcp.save(sd, checkpoint_id=os.path.join(out, "dcp_w2"))
    dist.destroy_process_group()


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    dcp.save(state(), checkpoint_id=os.path.join(out, "dcp_w1"))  # no process group: a single-process save
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(world2, args=(out, os.path.join(tmp, "init")), nprocs=2, join=True)
    print("torch", torch.__version__, "wrote", out)


if __name__ == "__main__":
    main()
