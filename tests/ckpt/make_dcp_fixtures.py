#!/usr/bin/env python3
"""Make the DCP fixtures under tests/ckpt/fixtures/ with torch's own dcp.save.

Run with torch 2.x (Debian 13's python3-torch 2.6), e.g. from the source tree:
  scripts/torch2-root.sh run -- python3 tests/ckpt/make_dcp_fixtures.py tests/ckpt/fixtures [NAME...]
(the root of issue 24's helper; see docs/DATA.md).  Writes (only the NAMEs given, if any):
  dcp_w1/  world 1: w float32 [4,3] = arange, b bfloat16 [5] = arange/4,
           step int64 scalar = 7, extra.epoch (a Python int: a bytes item)
  dcp_w2/  world 2 (gloo, two processes): w a DTensor sharded on dim 0
           (chunks [0:2] and [2:4]), b replicated (saved once), step = 7,
           extra.epoch = 3
  dcp_optim/ world 1: {"model": Net().state_dict(), "optim": get_optimizer_state_dict(...)}
           of a Linear fc1 (3 -> 2) after one SGD step (lr 0.01, momentum 0.5), so
           the param_groups are bytes items holding Python floats, bools, None,
           a list of str; plus extra.nested (a dict of a list, None, a tuple of
           a bool and bytes), extra.raw (bytes, which protocol 2 pickles as
           _codecs.encode(str, "latin1")) and two values spmd must refuse: extra.dtype
           (torch.float32, a global) and extra.cplx (complex(1, 2), a REDUCE of
           builtins.complex)
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


def optim_fixture(path):
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = torch.nn.Linear(3, 2)

        def forward(self, x):
            return self.fc1(x)

    torch.manual_seed(0)
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.5)
    net(torch.ones(4, 3)).sum().backward()
    opt.step()
    sd = {"model": net.state_dict(), "optim": get_optimizer_state_dict(net, opt),
          "extra": {"nested": {"a": [1, 2.5, "x"], "b": None, "t": (True, b"raw")},
                    "raw": b"\x00\xffrng", "dtype": torch.float32, "cplx": complex(1, 2)}}
    dcp.save(sd, checkpoint_id=path)


def main():
    out = sys.argv[1]
    only = set(sys.argv[2:])  # names to make (default: all)
    os.makedirs(out, exist_ok=True)
    if not only or "dcp_w1" in only:
        dcp.save(state(), checkpoint_id=os.path.join(out, "dcp_w1"))  # no process group: a single-process save
    if not only or "dcp_optim" in only:
        optim_fixture(os.path.join(out, "dcp_optim"))
    if not only or "dcp_w2" in only:
        with tempfile.TemporaryDirectory() as tmp:
            mp.spawn(world2, args=(out, os.path.join(tmp, "init")), nprocs=2, join=True)
    print("torch", torch.__version__, "wrote", out)

if __name__ == "__main__":
    main()
