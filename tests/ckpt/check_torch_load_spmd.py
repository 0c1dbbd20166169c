#!/usr/bin/env python3
"""torch's dcp.load of a checkpoint spmd saved at world 2
(test_ckpt_dist DIR keeps one): every tensor equal bit for bit to what the
ranks saved, the bytes items torch.load-ed as Python bytes.  Then torch
loads it again as two row shards of w (DTensor-free: narrow views are not
needed, dcp.load reshards into the plain tensors given).
Exit 77 without torch 2.x.  Usage: check_torch_load_spmd.py DIR"""
import sys

try:
    import torch
    import torch.distributed.checkpoint as dcp
except ImportError:
    sys.exit(77)


def main():
    d = sys.argv[1]
    sd = {"w": torch.zeros(8, 3), "v": torch.zeros(4, 6), "m": torch.zeros(10),
          "b": torch.zeros(5, dtype=torch.bfloat16), "step": torch.tensor(0, dtype=torch.int64),
          "sampler": b"", "rng.0": b"", "rng.1": b""}
    dcp.load(sd, checkpoint_id=d)
    i = torch.arange(24, dtype=torch.float32)
    want = {"w": (i * 0.25 - 3.0).reshape(8, 3), "v": (i * 1.5 + 0.125).reshape(4, 6),
            "m": 1.0 / torch.arange(1, 11, dtype=torch.float32),
            "b": (torch.arange(5, dtype=torch.float32) / 4).to(torch.bfloat16)}
    ok = all(torch.equal(sd[k], v) for k, v in want.items())
    ok = ok and int(sd["step"]) == 7 and sd["sampler"] == b"epoch=2,index=640"
    ok = ok and sd["rng.0"] == b"state-of-0" and sd["rng.1"] == b"state-of-1"
    print("torch", torch.__version__, "dcp.load of an spmd world-2 save:", "equal" if ok else sd)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
