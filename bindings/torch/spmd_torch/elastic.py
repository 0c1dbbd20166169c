"""spmd_torch.elastic — DDP that survives lost ranks in place, over spmd's
elastic training (spmd/elastic.h, docs/RELIABILITY.md "Training on top").

    import spmd_torch.elastic as elastic
    dist.init_process_group("spmd")
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    el = elastic.Elastic(model.state_dict())     # the tensors that make a replica
    pg = el.process_group
    ddp = DDP(model, process_group=pg)
    while el.steps < steps:
        try:
            with el.step():                      # commits when the block ends normally
                opt.zero_grad()
                loss_fn(ddp(x), y).backward()    # a lost rank raises here ...
                opt.step()
        except elastic.RanksFailed as e:         # ... naming it: e.failed_ranks
            pg = el.recover()                    # the survivors agree, same state everywhere
            ddp = DDP(model, process_group=pg)   # rebuilt on the new group

The commit rule is spmd_elastic's: a step whose gradient reduction completed
on some survivor is applied on all of them, otherwise on none, so at most
one step is redone and the replicas' state is bit-identical after recover().
The registered tensors must be contiguous CPU tensors updated in place
(parameters and buffers of a module's state_dict; optimizer state that
exists before the first step), changed only after the reduction succeeded,
or registered with keep=True (BatchNorm's running statistics, which forward
changes).  Under spmdrun --on-failure shrink the survivors keep running when
a rank is killed.  The group's rank 0 hosts the group's store: it must
survive.
"""
import contextlib

import torch
import torch.distributed as dist

from . import _C

__all__ = ["Elastic", "RanksFailed"]


class RanksFailed(RuntimeError):
    """A collective failed because ranks of the group were lost.
    failed_ranks: their ranks in the group the step ran on (empty when this
    rank learned of the failure only as a broken group)."""

    def __init__(self, failed_ranks, message):
        super().__init__(message)
        self.failed_ranks = list(failed_ranks)


def _backend(pg):
    if _C.backend_api:  # torch 2.x: the spmd Backend inside torch's ProcessGroup
        return pg._get_backend(torch.device("cpu"))
    return pg


def _process_group(backend):
    """The process group torch's DDP and collectives take, over backend."""
    if not _C.backend_api:
        return backend
    pg = dist.ProcessGroup(dist.HashStore(), backend.rank(), backend.size())
    custom = dist.ProcessGroup.BackendType.CUSTOM
    pg._set_default_backend(custom)
    pg._register_backend(torch.device("cpu"), custom, backend)
    return pg


class Elastic:
    """The replica's state (a mapping of names to tensors, on every rank in
    the same order with the same shapes) over process_group (the default
    group if None), which must be of the spmd backend."""

    def __init__(self, state, process_group=None, keep=()):
        pg = process_group if process_group is not None else dist.distributed_c10d._get_default_group()
        self._el = _C.Elastic(_backend(pg))
        self._pg = pg
        for name, t in state.items():
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"spmd_torch.elastic: state {name!r} is a {type(t).__name__}, not a tensor")
            self._el.add_state(name, t, name in keep)

    @property
    def process_group(self):
        """The group to run the step's collectives on (DDP's process_group)."""
        return self._pg

    @property
    def steps(self):
        """Steps committed (the survivors' agreed count after recover())."""
        return self._el.commits()

    @contextlib.contextmanager
    def step(self):
        """One training step: commits when the block ends without an
        exception; a collective failed by lost ranks raises RanksFailed."""
        self._el.begin_step()
        try:
            yield
        except RuntimeError as e:
            ranks = self._el.failed_ranks()
            if not ranks and "spmd" not in str(e):
                raise
            named = ", ".join(map(str, ranks)) or "unknown"
            raise RanksFailed(ranks, f"spmd_torch.elastic: rank(s) {named} of the group failed: {e}") from e
        self._el.commit()

    def recover(self):
        """Collective over the survivors after RanksFailed: shrink to a new
        group, agree on the committed steps, send the state from a survivor
        that has it.  Returns the new process group (also .process_group);
        the old one refuses further operations.  Raises RuntimeError naming
        the cause when the recovery fails (this rank was excluded, the
        registrations differ, the deadline passed)."""
        self._pg = _process_group(self._el.recover())
        return self._pg

    def last_recovery(self):
        """The last recovery (spmd_elastic_info as a dict: world_before,
        world_after, epoch, commits_here, commits_agreed, steps_lost,
        source_rank, seconds)."""
        return self._el.last()
