#!/usr/bin/env python3
"""torch 2.x's dcp.load of an spmd-train checkpoint into the seeds' CNN and
its Adam optimizer (issue 26: torch's names for the seeds' models and
optimizers).  spmd-train runs at world 2 with ZeRO-1 (so the moments are
saved as slices by two ranks) on small generated Fashion-MNIST-format files,
with --checkpoint-dir and --save-model; then torch
  - dcp.load({"model": model.state_dict()}) — every key of the module's
    state_dict is found, and the values equal the --save-model file's;
  - dcp.load({"optim": get_optimizer_state_dict(model, opt)}) strictly (no
    allow_partial_load): every exp_avg, exp_avg_sq and step of torch's
    optimizer state and every key of its param_groups is in the checkpoint,
    of torch's shape, the hyperparameters are spmd-train's (lr 0.001, betas,
    eps, the parameter names) and set_optimizer_state_dict takes it.
Exit 77 without torch 2.x.  Usage: check_torch_dcp.py SPMD_TRAIN SPMDRUN"""
import json
import os
import struct
import subprocess
import sys
import tempfile

try:
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict
except ImportError as e:
    print(f"SKIP: {e}")
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from train_torch import Net  # noqa: E402

TRAIN, SPMDRUN = sys.argv[1], sys.argv[2]


def idx(path, magic, dims, payload):
    with open(path, "wb") as f:
        f.write(struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in dims) + payload)


def safetensors(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    hdr = json.loads(raw[8:8 + n])
    hdr.pop("__metadata__", None)
    out = {}
    for k, v in hdr.items():
        b, e = v["data_offsets"]
        out[k] = torch.frombuffer(bytearray(raw[8 + n + b:8 + n + e]), dtype=torch.float32).reshape(v["shape"])
    return out


with tempfile.TemporaryDirectory() as tmp:
    for split, n in (("train", 64), ("t10k", 16)):
        idx(f"{tmp}/{split}-images-idx3-ubyte", 0x803, (n, 28, 28),
            bytes((i * 7 + r) % 251 for r in range(n) for i in range(784)))
        idx(f"{tmp}/{split}-labels-idx1-ubyte", 0x801, (n,), bytes(r % 10 for r in range(n)))
    run = subprocess.run([SPMDRUN, "--standalone", "--nproc-per-node", "2", TRAIN, "--data", tmp, "--model", "cnn",
                          "--zero", "--optimizer", "adam", "--lr", "0.001", "--batch-size", "8", "--steps", "3",
                          "--no-eval", "--quiet", "--checkpoint-dir", f"{tmp}/ck", "--save-model", f"{tmp}/m.st"],
                         capture_output=True, text=True)
    if run.returncode != 0:
        print(run.stdout, run.stderr)
        sys.exit(1)
    ck = f"{tmp}/ck/step-3"
    model = Net()
    sd = {"model": model.state_dict()}
    dcp.load(sd, checkpoint_id=ck)   # a key of the module missing from the checkpoint raises
    model.load_state_dict(sd["model"])
    saved = safetensors(f"{tmp}/m.st")
    ok = set(saved) == set(model.state_dict()) and all(torch.equal(model.state_dict()[k], v) for k, v in saved.items())
    print("model: dcp.load into the seeds' CNN", "equals --save-model" if ok else "DIFFERS from --save-model")
    opt = torch.optim.Adam(model.parameters(), lr=0.001)
    model(torch.zeros(1, 1, 28, 28)).sum().backward()
    opt.step()   # torch's optimizer state exists after a step
    osd = get_optimizer_state_dict(model, opt)
    meta = dcp.FileSystemReader(ck).read_metadata().state_dict_metadata
    want = {f"optim.state.{p}.{k}": v for p, st in osd["state"].items() for k, v in st.items()}
    missing = [k for k in want if k not in meta]
    shapes = [k for k, v in want.items() if k in meta and list(meta[k].size) != list(v.shape)]
    groups = [k for k in meta if k.startswith("optim.param_groups.")]
    dcp.load({"optim": osd}, checkpoint_id=ck, planner=DefaultLoadPlanner(allow_partial_load=False))
    g = osd["param_groups"][0]
    names = [n for n, _ in model.named_parameters()]
    hyper = (abs(g["lr"] - 0.001) < 1e-9 and [abs(b - w) < 1e-7 for b, w in zip(g["betas"], (0.9, 0.999))] == [True] * 2
             and abs(g["eps"] - 1e-8) < 1e-12 and g["weight_decay"] == 0 and g["params"] == names)
    print(f"optim: param_groups keys {sorted(groups)}, spmd-train's hyperparameters: {hyper}")
    set_optimizer_state_dict(model, opt, osd)
    steps = {float(st["step"]) for st in opt.state.values()}
    print(f"optim: {len(want)} tensors of torch's Adam state, missing {missing}, other shapes {shapes}, steps {steps}")
    ok = ok and not missing and not shapes and steps == {3.0} and len(want) == 3 * len(list(model.parameters()))
    ok = ok and hyper and opt.param_groups[0]["lr"] == g["lr"]
    sys.exit(0 if ok else 1)
