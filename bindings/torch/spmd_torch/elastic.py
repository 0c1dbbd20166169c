"""spmd_torch.elastic — DDP that survives lost ranks in place and takes
replacements in, over spmd's elastic training (spmd/elastic.h,
docs/RELIABILITY.md "Training on top").

    import spmd_torch.elastic as elastic
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    if elastic.joining():                        # a replacement (spmdrun --on-failure replace)
        el = elastic.Elastic(model.state_dict(), join=True)   # joins; gets the state live
    else:
        dist.init_process_group("spmd")
        el = elastic.Elastic(model.state_dict())  # the tensors that make a replica
    ddp = DDP(model)
    while el.steps < steps:
        try:
            n = el.joiners_waiting()             # collective, at a step boundary
            if n:
                el.grow(n)                       # they get the state; world += n
                ddp = DDP(model)                 # rebuilt on the larger world
            with el.step():                      # commits when the block ends normally
                opt.zero_grad()
                loss_fn(ddp(x), y).backward()    # a lost rank raises here ...
                opt.step()
        except elastic.RanksFailed as e:         # ... naming it: e.failed_ranks
            el.recover()                         # the survivors agree, same state everywhere
            ddp = DDP(model)                     # rebuilt on the new group

The new group of recover() and grow() becomes torch's default group when
the old one was it (collectives without group=, get_rank(),
get_world_size(), barrier(), DDP without process_group= act on the new
world), and is el.process_group either way.

The commit rule is spmd_elastic's: a step whose gradient reduction completed
on some survivor is applied on all of them, otherwise on none, so at most
one step is redone and the replicas' state is bit-identical after recover().
The registered tensors must be contiguous CPU tensors updated in place
(parameters and buffers of a module's state_dict; optimizer state that
exists before the first step), changed only after the reduction succeeded,
or registered with keep=True (BatchNorm's running statistics, which forward
changes).  Under spmdrun --on-failure shrink the survivors keep running when
a rank is killed, rank 0 included: spmdrun's agent hosts the default group's
store.  Other launchers: the group's rank 0 hosts its store and must
survive, and joining needs spmdrun.
"""
import contextlib
import os

import torch
import torch.distributed as dist

from . import _C
from . import _default_group

__all__ = ["Elastic", "RanksFailed", "joining"]


def joining():
    """Is this process a replacement that should join the running group
    (Elastic(..., join=True)) rather than init_process_group?  spmdrun
    --on-failure replace starts them with SPMD_JOIN=1."""
    return os.environ.get("SPMD_JOIN") == "1"


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
    from . import _named_group  # torch 2.x only
    return _named_group.make(dist.HashStore(), backend)


class Elastic:
    """The replica's state (a mapping of names to tensors, on every rank in
    the same order with the same shapes) over process_group (the default
    group if None), which must be of the spmd backend.  join=True (a
    replacement under spmdrun, see joining()): instead, join the running
    default group when its ranks next grow, make it this process's default
    group, and receive the state and the committed count from them; timeout
    (a timedelta, default torch's default) bounds the wait and is the
    group's operations' timeout."""

    def __init__(self, state, process_group=None, keep=(), join=False, timeout=None):
        if join:
            if process_group is not None:
                raise ValueError("spmd_torch.elastic: join=True joins the default group; pass no process_group")
            if dist.is_initialized():
                raise RuntimeError("spmd_torch.elastic: join=True is for a process that has no default group "
                                   "(a replacement does not call init_process_group)")
            timeout = timeout if timeout is not None else dist.distributed_c10d.default_pg_timeout
            pg = _process_group(_C.join_default_group(timeout))
            _default_group.replace_default(None, pg)
        else:
            pg = process_group if process_group is not None else dist.distributed_c10d._get_default_group()
        self._el = _C.Elastic(_backend(pg))
        self._pg = pg
        for name, t in state.items():
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"spmd_torch.elastic: state {name!r} is a {type(t).__name__}, not a tensor")
            self._el.add_state(name, t, name in keep)
        if join:
            self._el.join_sync()

    @property
    def process_group(self):
        """The group to run the step's collectives on (DDP's process_group)."""
        return self._pg

    @property
    def steps(self):
        """Steps committed (the survivors' agreed count after recover(); a
        joiner's is the group's)."""
        return self._el.commits()

    def _failed(self, e):
        """e (a RuntimeError from the spmd backend) as RanksFailed, or None
        when it is not a failure of the group."""
        ranks = self._el.failed_ranks()
        if not ranks and "spmd" not in str(e):
            return None
        named = ", ".join(map(str, ranks)) or "unknown"
        return RanksFailed(ranks, f"spmd_torch.elastic: rank(s) {named} of the group failed: {e}")

    @contextlib.contextmanager
    def step(self):
        """One training step: commits when the block ends without an
        exception; a collective failed by lost ranks raises RanksFailed."""
        self._el.begin_step()
        try:
            yield
        except RuntimeError as e:
            failed = self._failed(e)
            if failed is None:
                raise
            raise failed from e
        self._el.commit()

    def _adopt(self, backend):
        """The process group over backend replaces the current one (as
        torch's default group too when the current one was it)."""
        old, new = self._pg, _process_group(backend)
        if _default_group.is_default(old):
            _default_group.replace_default(old, new)
        self._pg = new
        return new

    def recover(self):
        """Collective over the survivors after RanksFailed: shrink to a new
        group, agree on the committed steps, send the state from a survivor
        that has it.  Returns the new process group (also .process_group,
        and torch's default group when the old one was); the old one refuses
        further operations.  Raises RuntimeError naming the cause when the
        recovery fails (this rank was excluded, the registrations differ,
        the deadline passed)."""
        return self._adopt(self._el.recover())

    def joiners_waiting(self):
        """Collective over the group, at a step boundary: how many processes
        wait to join it (the same answer on every rank).  RanksFailed when
        the group has failed (recover, then go on)."""
        try:
            return self._el.joiners_waiting()
        except RuntimeError as e:
            failed = self._failed(e)
            if failed is None:
                raise
            raise failed from e

    def grow(self, n):
        """Collective over the group, at a step boundary: admit n waiting
        processes, send them the state and the committed count.  Returns the
        grown process group (also .process_group, and torch's default group
        when the old one was), the joiners ranked after the members.  Waits
        for n joiners until the group's timeout.  A joiner or member dying
        meanwhile raises RanksFailed: recover(), as after a failed step."""
        try:
            return self._adopt(self._el.grow(n))
        except RuntimeError as e:
            failed = self._failed(e)
            if failed is None:
                raise
            raise failed from e

    def last_recovery(self):
        """The last recovery or grow (spmd_elastic_info as a dict:
        world_before, world_after, epoch, commits_here, commits_agreed,
        steps_lost, source_rank, seconds)."""
        return self._el.last()
