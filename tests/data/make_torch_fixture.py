#!/usr/bin/env python3
"""Writes tests/data/torch_fixture.safetensors: tensors made by PyTorch,
serialised exactly as the safetensors library does (the Python package is not
packaged for Debian bookworm, so this script follows its writer by hand with
json + struct): tensors sorted by decreasing dtype alignment then name, compact
JSON header with "__metadata__" first, padded with spaces to a multiple of 8
bytes, little-endian data.  tests/unit/test_data_ckpt_torch.c checks every value.

Run with a Python that has torch:  /usr/bin/python3 tests/data/make_torch_fixture.py
"""
import json
import os
import struct
import sys

import torch

DTYPES = {  # torch dtype -> (safetensors name, alignment/size)
    torch.float64: ("F64", 8), torch.int64: ("I64", 8), torch.float32: ("F32", 4),
    torch.int32: ("I32", 4), torch.float16: ("F16", 2), torch.bfloat16: ("BF16", 2),
    torch.int16: ("I16", 2), torch.uint8: ("U8", 1), torch.int8: ("I8", 1), torch.bool: ("BOOL", 1),
}


def tensor_bytes(t):
    t = t.contiguous()
    if t.dtype in (torch.float16, torch.bfloat16):
        t = t.view(torch.int16)
    b = t.numpy().tobytes()
    if sys.byteorder != "little" and t.element_size() > 1:
        raise SystemExit("big-endian host: swap bytes first")
    return b


def save(tensors, metadata, path):
    order = sorted(tensors.items(), key=lambda kv: (-DTYPES[kv[1].dtype][1], kv[0]))
    header = {}
    if metadata:
        header["__metadata__"] = metadata
    blobs, at = [], 0
    for name, t in order:
        b = tensor_bytes(t)
        header[name] = {"dtype": DTYPES[t.dtype][0], "shape": list(t.shape),
                        "data_offsets": [at, at + len(b)]}
        at += len(b)
        blobs.append(b)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def main():
    torch.manual_seed(0)
    tensors = {
        "fc1.weight": torch.arange(12, dtype=torch.float32).reshape(3, 4) / 8,
        "fc1.bias": torch.tensor([-1.5, 0.0, 2.25]),
        "step": torch.tensor(1875, dtype=torch.int64),
        "d": torch.arange(5, dtype=torch.float64) / 4,
        "half": torch.tensor([1.0, -2.0, 0.5, 65504.0], dtype=torch.float16),
        "bf": torch.tensor([1.0, -0.5, 3.0], dtype=torch.bfloat16),
        "mask": torch.tensor([True, False, True]),
        "empty": torch.zeros(0, 3),
        "u8": torch.arange(10, dtype=torch.uint8),
        "nan": torch.tensor([float("nan"), float("-inf")], dtype=torch.float32),
    }
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_fixture.safetensors")
    save(tensors, {"format": "pt", "epoch": "7", "torch": torch.__version__}, out)
    print("wrote", out)


if __name__ == "__main__":
    main()
