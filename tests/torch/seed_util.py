"""Helpers the seed programs need on this machine: a free port instead of the
seeds' fixed or random ones, and Fashion-MNIST read from Debian's IDX files
(torchvision is not in Debian), cut small; synthetic data when it is absent."""
import gzip
import os
import socket
import struct


FASHION_MNIST = "/usr/share/datasets/fashion-mnist"


def free_port():
    """A port nobody listens on, below the kernel's ephemeral range (bind(0)
    would give an ephemeral port, which an outgoing connection of another
    process may take before the store binds it), chosen at random as the
    seeds do and checked by binding it."""
    import random  # (no torch here: run.py imports this module too)
    lo = 20000
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            eph = int(f.read().split()[0])
    except (OSError, ValueError):
        eph = 32768
    for _ in range(200):
        port = random.randrange(lo, max(lo + 1000, eph))
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port below the ephemeral range")


def _read_idx(path, n):
    """The first n items of an unsigned-byte IDX file (reads only those)."""
    import torch
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        zero, dtype, ndim = struct.unpack(">HBB", f.read(4))
        assert zero == 0 and dtype == 0x08, f"{path}: not an unsigned-byte IDX file"
        dims = list(struct.unpack(">" + "I" * ndim, f.read(4 * ndim)))
        dims[0] = min(n, dims[0])
        item = 1
        for d in dims[1:]:
            item *= d
        data = f.read(dims[0] * item)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).reshape(dims)


def _find(stem):
    for name in (stem, stem + ".gz"):
        p = os.path.join(FASHION_MNIST, name)
        if os.path.exists(p):
            return p
    return None


def mnist_like(n=256):
    """The first n training images as (n,1,28,28) float, normalized as the
    seeds' transforms do, and their labels."""
    import torch
    from torch.utils.data import TensorDataset

    img, lab = _find("train-images-idx3-ubyte"), _find("train-labels-idx1-ubyte")
    if img and lab:
        x = _read_idx(img, n).float().div(255.0).unsqueeze(1)
        y = _read_idx(lab, n).long()
    else:
        g = torch.Generator().manual_seed(0)
        x = torch.rand(n, 1, 28, 28, generator=g)
        y = torch.randint(0, 10, (n,), generator=g)
    return TensorDataset((x - 0.1307) / 0.3081, y)
