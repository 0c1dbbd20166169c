#!/usr/bin/env python3
"""spmd <-> PyTorch state_dict round trip for the seeds' CNN (seed 000) and
MLP (seed 003) on Fashion-MNIST (issue 12, point 6):

  spmd -> torch: spmd-train trains briefly and writes --save-model; torch's
      model.load_state_dict(load_file(path)) (strict) takes it and evaluates
      the test set: the same number of correct answers as spmd-train's own
      evaluation.
  torch -> spmd: torch trains the same architecture briefly and saves its
      state_dict; spmd-train --load-model --epochs 0 evaluates it: the same
      number of correct answers as torch.

Debian has no python3-safetensors, so the file format (8-byte little-endian
header length, JSON header, raw little-endian data) is read and written here
with json + struct.  Exit 0: pass, 1: fail, 77: torch or the data set is
missing.

Usage: torch_roundtrip.py SPMD_TRAIN [DATA_DIR]"""
import json
import os
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:
    # the python3 first in PATH may lack Debian's python3-torch: try
    # $SPMD_PYTHON, then the system's interpreter (as test_data_ckpt_python)
    for cand in (os.environ.get("SPMD_PYTHON"), "/usr/bin/python3"):
        if cand and os.path.exists(cand) and os.path.realpath(cand) != os.path.realpath(sys.executable) \
                and not os.environ.get("SPMD_ROUNDTRIP_REEXEC"):
            os.environ["SPMD_ROUNDTRIP_REEXEC"] = "1"
            os.execv(cand, [cand, *sys.argv])
    print(f"SKIP: {e}")
    sys.exit(77)

TRAIN = sys.argv[1]
DATA = sys.argv[2] if len(sys.argv) > 2 else "/usr/share/datasets/fashion-mnist"
torch.set_num_threads(1)


# ---- safetensors with json + struct -------------------------------------------
def save_file(tensors, path):
    header, blobs, at = {}, [], 0
    for name, t in tensors.items():
        b = t.detach().contiguous().to(torch.float32).numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [at, at + len(b)]}
        blobs.append(b)
        at += len(b)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def load_file(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for name, info in header.items():
        assert info["dtype"] == "F32", f"{name}: {info['dtype']}"
        b, e = info["data_offsets"]
        a = np.frombuffer(raw, "<f4", count=(e - b) // 4, offset=8 + n + b)
        out[name] = torch.from_numpy(a.copy()).reshape(info["shape"])
    return out


# ---- the seeds' models: the benchmark peer's definitions (bench/train_torch.py)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from train_torch import MLP, Net, load_split  # noqa: E402


def correct(model, x, y):
    model.eval()
    hits = 0
    with torch.no_grad():
        for i in range(0, len(y), 500):
            hits += int((model(x[i:i + 500]).argmax(1) == y[i:i + 500]).sum())
    return hits


def spmd_correct(metrics):   # the last evaluation spmd-train recorded
    rec = [json.loads(l) for l in open(metrics) if "test_correct" in l][-1]
    return rec["test_correct"], rec["test_total"]


def spmd_train(*args):
    r = subprocess.run([TRAIN, "--data", DATA, "--quiet", *args], capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stdout, r.stderr)
        sys.exit(1)


for split in ("train", "t10k"):
    if not any(os.path.exists(f"{DATA}/{split}-images-idx3-ubyte{gz}") for gz in ("", ".gz")):
        print(f"SKIP: Fashion-MNIST is not in {DATA}")
        sys.exit(77)
# a brief training (960 samples, 30 steps) and the first 1000 test images
# keep the test short, also in the sanitizer builds
TRAIN_N, TEST_N = 960, 1000
xt, yt = load_split(DATA, "t10k")
xs, ys = load_split(DATA, "train")
xt, yt, xs, ys = xt[:TEST_N], yt[:TEST_N], xs[:TRAIN_N], ys[:TRAIN_N]
failed = 0
with tempfile.TemporaryDirectory() as tmp:
    for arch, cls in (("cnn", Net), ("mlp", MLP)):
        # spmd -> torch
        path, metrics = f"{tmp}/{arch}_spmd.safetensors", f"{tmp}/{arch}_a.jsonl"
        spmd_train("--model", arch, "--train-samples", str(TRAIN_N), "--batch-size", "32", "--epochs", "1",
                   "--test-samples", str(TEST_N), "--save-model", path, "--metrics", metrics)
        want, total = spmd_correct(metrics)
        model = cls()
        model.load_state_dict(load_file(path))          # strict: names and shapes all match
        got = correct(model, xt, yt)
        print(f"{arch} spmd -> torch: spmd-train {want}/{total}, torch {got}/{len(yt)}")
        if (got, len(yt)) != (want, total):
            failed += 1
        # torch -> spmd
        torch.manual_seed(3)
        model = cls()
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.5)
        model.train()
        for i in range(0, len(ys), 32):
            opt.zero_grad()
            F.cross_entropy(model(xs[i:i + 32]), ys[i:i + 32]).backward()
            opt.step()
        want = correct(model, xt, yt)
        path, metrics = f"{tmp}/{arch}_torch.safetensors", f"{tmp}/{arch}_b.jsonl"
        save_file(model.state_dict(), path)
        spmd_train("--model", arch, "--epochs", "0", "--test-samples", str(TEST_N), "--load-model", path,
                   "--metrics", metrics)
        got, total = spmd_correct(metrics)
        print(f"{arch} torch -> spmd: torch {want}/{len(yt)}, spmd-train {got}/{total}")
        if (got, total) != (want, len(yt)):
            failed += 1
print("FAIL" if failed else "PASS")
sys.exit(1 if failed else 0)
