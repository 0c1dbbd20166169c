"""spmd as a torch.distributed backend.

    import spmd_torch
    torch.distributed.init_process_group("spmd")

Importing this module registers the backend name "spmd".  Under spmdrun, whose
agent hosts an spmd store at MASTER_ADDR:MASTER_PORT (not a torch TCPStore),
env:// and tcp:// rendezvous go through that store.
"""
import datetime
import importlib
import os

import torch.distributed as dist

from . import _C

if _C.backend_api:
    from . import _named_group

# torch.distributed.rendezvous the module (the package's attribute of that name
# is a function).
_rdzv = importlib.import_module("torch.distributed.rendezvous")

__all__ = ["create_process_group"]

create_process_group = _C.create_process_group


def _create_backend(store, rank, world_size, timeout):
    # The group torch makes while it has no default group is the default
    # group: under spmdrun it forms on the agent's store (so no rank is
    # special to spmd_torch.elastic's recovery, and replacements can join).
    backend = _C.create_process_group(store, rank, world_size, timeout,
                                      default_group=not dist.is_initialized())
    if _C.backend_api:  # torch 2.x: in a ProcessGroup named "spmd" (_named_group.py)
        return _named_group.make(store, backend, timeout)
    return backend


if "SPMD" not in dist.Backend._plugins:
    if _C.backend_api:
        # torch 2.x: a c10d.Backend for CPU tensors, in a ProcessGroup (torch
        # gives it the group's name, so functional collectives and DeviceMesh
        # find it; _get_backend(torch.device("cpu")) returns the backend).
        dist.Backend.register_backend("spmd", _create_backend, devices=["cpu"])
    else:
        dist.Backend.register_backend("spmd", _create_backend)


def _under_spmdrun():
    return "SPMD_RUN_ID" in os.environ and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"


_torch_create_c10d_store = _rdzv._create_c10d_store


def _create_c10d_store(hostname, port, rank, world_size, timeout, *args, **kwargs):
    # spmdrun's agent store speaks spmd's store protocol; every other store is
    # torch's own (whatever further arguments this torch passes: use_libuv
    # since 2.4).
    if _under_spmdrun() and str(hostname) == os.environ.get("MASTER_ADDR") and \
            str(port) == os.environ.get("MASTER_PORT"):
        return _C.spmd_store(hostname, int(port), timeout)
    try:
        return _torch_create_c10d_store(hostname, port, rank, world_size, timeout, *args, **kwargs)
    except RuntimeError as e:
        # Debian 13's torch 2.6 is built without libuv, yet its TCPStore asks
        # for libuv by default (and USE_LIBUV=0 does not reach every path):
        # env:// and tcp:// fail for every backend.  Make torch's rendezvous
        # use the classic TCPStore from now on.
        if "libuv" not in str(e) or _rdzv.TCPStore is _ClassicTCPStore:
            raise
        _rdzv.TCPStore = _ClassicTCPStore
        return _torch_create_c10d_store(hostname, port, rank, world_size, timeout, *args, **kwargs)


class _ClassicTCPStore(dist.TCPStore):
    """torch's TCPStore without libuv, whatever the caller asks for."""

    def __init__(self, *args, **kwargs):
        kwargs["use_libuv"] = False
        super().__init__(*args, **kwargs)


_rdzv._create_c10d_store = _create_c10d_store


_torch_monitored_barrier = dist.monitored_barrier


def monitored_barrier(group=None, timeout=None, wait_all_ranks=False):
    """torch.distributed.monitored_barrier, for spmd's groups too: torch's
    accepts gloo's alone (by name), though the operation is the backend's.
    On spmd, timeout=None means the group's timeout (init_process_group's)."""
    c10d = dist.distributed_c10d
    pg = group if group is not None else c10d._get_default_group()
    if c10d._rank_not_in_group(group) or dist.get_backend(pg) != "spmd":
        return _torch_monitored_barrier(group, timeout, wait_all_ranks)
    if isinstance(timeout, (int, float)):
        timeout = datetime.timedelta(seconds=timeout)  # as torch does
    if timeout is None:
        return pg.monitored_barrier(wait_all_ranks=wait_all_ranks)
    return pg.monitored_barrier(timeout, wait_all_ranks=wait_all_ranks)


dist.monitored_barrier = monitored_barrier
dist.distributed_c10d.monitored_barrier = monitored_barrier
