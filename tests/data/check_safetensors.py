#!/usr/bin/env python3
"""Reads a safetensors file written by tests/unit/test_data_ckpt_torch.c with
PyTorch and checks it: the layout rules of the format (validated here with
json + struct, as the safetensors library does) and every tensor's values,
bit for bit, against what the C test wrote.  Exit 0: good, 1: mismatch,
77: torch is not available (the C test then reports a skip).

Usage: python3 tests/data/check_safetensors.py FILE"""
import json
import math
import struct
import sys

try:
    import torch
except ImportError:
    print("torch not available")
    sys.exit(77)

TORCH = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16,
         "BF16": torch.bfloat16, "I64": torch.int64, "I32": torch.int32, "I8": torch.int8,
         "U8": torch.uint8, "BOOL": torch.bool}
SIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I8": 1, "U8": 1, "BOOL": 1}


def load(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    assert 8 + n <= len(raw), "header longer than the file"
    text = raw[8:8 + n].decode("utf-8")
    assert text.startswith("{"), "header must start with {"
    assert (8 + n) % 8 == 0, "data not 8-byte aligned"
    header = json.loads(text)
    meta = header.pop("__metadata__", {})
    data = raw[8 + n:]
    spans = sorted((v["data_offsets"][0], v["data_offsets"][1], k) for k, v in header.items())
    at = 0
    for b, e, k in spans:
        assert b == at, f"{k}: hole or overlap at {b}"
        info = header[k]
        count = math.prod(info["shape"])
        assert e - b == count * SIZE[info["dtype"]], f"{k}: size mismatch"
        assert b % SIZE[info["dtype"]] == 0, f"{k}: misaligned"
        at = e
    assert at == len(data), "data not fully covered"
    out = {}
    for k, info in header.items():
        b, e = info["data_offsets"]
        dt = TORCH[info["dtype"]]
        if e == b:
            out[k] = torch.empty(info["shape"], dtype=dt)
        else:
            out[k] = torch.frombuffer(bytearray(data[b:e]), dtype=dt).reshape(info["shape"])
    return out, meta


def bits(t):
    view = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.uint8}[t.element_size()]
    return t.contiguous().view(view).flatten().tolist()


def main():
    t, meta = load(sys.argv[1])
    expect = {
        "w": torch.tensor([[i * 0.25 - 1 for i in range(3)], [i * 0.25 - 1 for i in range(3, 6)]]),
        "b": torch.tensor([0.1, -2.5, 1e300], dtype=torch.float64),
        "n": torch.tensor(-42, dtype=torch.int64),
        "i8": torch.tensor([-128, -1, 0, 127], dtype=torch.int8),
        "u8": torch.tensor([[0, 1], [254, 255]], dtype=torch.uint8),
        "i32": torch.tensor([-2**31, 0, 2**31 - 1], dtype=torch.int32),
        "e": torch.empty(0),
    }
    raw_bits = {  # float payloads compared as integers
        "h": ((3,), torch.float16, [0x3C00, 0xC000 - 0x10000, 0x7E01]),
        "bf": ((2,), torch.bfloat16, [0x3F80, 0x4049]),
        "nan": ((2,), torch.float32, [0x7FC00001, 0xFF800000 - 0x100000000]),
    }
    ok = True
    for k, v in expect.items():
        if k not in t or t[k].dtype != v.dtype or t[k].shape != v.shape or bits(t[k]) != bits(v):
            print(f"tensor {k}: got {t.get(k)!r}, expected {v!r}")
            ok = False
    for k, (shape, dt, b) in raw_bits.items():
        if k not in t or t[k].dtype != dt or tuple(t[k].shape) != shape or bits(t[k]) != b:
            print(f"tensor {k}: got {t.get(k)!r} bits {bits(t[k]) if k in t else None}, expected {b}")
            ok = False
    if set(t) != set(expect) | set(raw_bits):
        print("unexpected tensor set", sorted(t))
        ok = False
    if meta != {"epoch": "5", "model": "mlp \"q\" \u00e9\n"}:
        print("metadata", meta)
        ok = False
    if ok:
        print(f"torch {torch.__version__} read {len(t)} tensors and the metadata bit-exactly")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
