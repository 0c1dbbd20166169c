#!/usr/bin/env python3
"""torch's dcp.load of a checkpoint whose .metadata spmd encoded (the data
files torch's own, from tests/ckpt/fixtures/dcp_w2): the loaded values must
be the fixture's (make_dcp_fixtures.py's state).  Exit 77 without torch 2.x.
Usage: check_torch_load.py DIR"""
import sys

try:
    import torch
    import torch.distributed.checkpoint as dcp
except ImportError:
    sys.exit(77)


def main():
    d = sys.argv[1]
    sd = {"w": torch.zeros(4, 3), "b": torch.zeros(5, dtype=torch.bfloat16),
          "step": torch.tensor(0, dtype=torch.int64), "extra": {"epoch": 0}}
    dcp.load(sd, checkpoint_id=d)
    want_w = torch.arange(12, dtype=torch.float32).reshape(4, 3)
    want_b = (torch.arange(5, dtype=torch.float32) / 4).to(torch.bfloat16)
    ok = (torch.equal(sd["w"], want_w) and torch.equal(sd["b"], want_b) and int(sd["step"]) == 7
          and sd["extra"]["epoch"] == 3)
    print("torch", torch.__version__, "dcp.load of spmd-encoded metadata:", "equal" if ok else sd)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
