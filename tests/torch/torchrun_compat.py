"""torchrun as the torch tests run it: tests/launcher/torchrun_py311.py (the
fix Debian 12's torch 1.13 needs under Python 3.11), and on a torch built
without libuv — Debian 13's torch 2.6 — torch's TCPStore made without it.

torch 2.x's TCPStore asks for libuv unless told otherwise, and torchrun's
agent makes its store without saying (USE_LIBUV=0 is not read there), so on
Debian 13 torchrun stops at start for every backend, gloo included: "use_libuv
was requested but PyTorch was build without libuv support".  The workers'
env:// rendezvous is spmd_torch's to handle (spmd_torch/__init__.py)."""
import os
import runpy
import sys

import torch.distributed as dist


def _without_libuv():
    """True when this torch's TCPStore has a libuv flag and cannot honour it."""
    try:
        dist.TCPStore("127.0.0.1", 0, 1, True, use_libuv=True)
    except TypeError:
        return False  # torch 1.x: no such choice
    except RuntimeError as e:
        return "libuv" in str(e)
    return False


if _without_libuv():
    class _ClassicTCPStore(dist.TCPStore):
        def __init__(self, *args, **kwargs):
            kwargs.setdefault("use_libuv", False)
            super().__init__(*args, **kwargs)

    dist.TCPStore = _ClassicTCPStore

here = os.path.dirname(os.path.abspath(__file__))
sys.argv = [os.path.join(here, "..", "launcher", "torchrun_py311.py")] + sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
