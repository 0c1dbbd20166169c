"""spmd as a torch.distributed backend.

    import spmd_torch
    torch.distributed.init_process_group("spmd")

Importing this module registers the backend name "spmd".  Under spmdrun, whose
agent hosts an spmd store at MASTER_ADDR:MASTER_PORT (not a torch TCPStore),
env:// and tcp:// rendezvous go through that store.
"""
import importlib
import os

import torch.distributed as dist

from . import _C

# torch.distributed.rendezvous the module (the package's attribute of that name
# is a function).
_rdzv = importlib.import_module("torch.distributed.rendezvous")

__all__ = ["create_process_group"]

create_process_group = _C.create_process_group

if "SPMD" not in dist.Backend._plugins:
    dist.Backend.register_backend("spmd", _C.create_process_group)


def _under_spmdrun():
    return "SPMD_RUN_ID" in os.environ and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"


_torch_create_c10d_store = _rdzv._create_c10d_store


def _create_c10d_store(hostname, port, rank, world_size, timeout):
    # spmdrun's agent store speaks spmd's store protocol; every other store is
    # torch's own.
    if _under_spmdrun() and str(hostname) == os.environ.get("MASTER_ADDR") and \
            str(port) == os.environ.get("MASTER_PORT"):
        return _C.spmd_store(hostname, int(port), timeout)
    return _torch_create_c10d_store(hostname, port, rank, world_size, timeout)


_rdzv._create_c10d_store = _create_c10d_store
