"""torch 2.x: the ProcessGroup that holds spmd's backend, named "spmd".

torch wraps a third-party c10d.Backend in a ProcessGroup of its own whose
name (ProcessGroup::getBackendName(), what DDP's logger records as
"backend_name" and pg.name() returns) is "custom" for every third-party
backend; dist.get_backend(pg) says "spmd".  torch's ProcessGroup can be
subclassed from Python (its PyProcessGroup trampoline forwards
getBackendName), and a backend creator that returns a ProcessGroup is taken
as the group itself: so spmd's creator returns SpmdProcessGroup, with the
spmd backend registered for CPU tensors and as the default backend, as torch
registers it — every operation still goes through torch's dispatcher to
spmd's backend.

torch skips one step for a returned ProcessGroup: under
TORCH_DISTRIBUTED_DEBUG=DETAIL it wraps the backend in its ProcessGroupWrapper
(checks that every rank calls the same collective with the same shapes, over
a helper gloo group), as it does for gloo.  make() does that here."""
import torch
import torch.distributed as dist

_CUSTOM = dist.ProcessGroup.BackendType.CUSTOM


class SpmdProcessGroup(dist.ProcessGroup):
    """torch's ProcessGroup over one spmd backend, named "spmd"."""

    def __init__(self, store, backend):
        super().__init__(store, backend.rank(), backend.size())
        self._set_default_backend(_CUSTOM)
        self._register_backend(torch.device("cpu"), _CUSTOM, backend)

    def getBackendName(self):  # noqa: N802  (the C++ name the trampoline looks up)
        return "spmd"


def make(store, backend, timeout=None):
    """The group over backend (made on store, torch's store of the group),
    wrapped for TORCH_DISTRIBUTED_DEBUG=DETAIL as torch wraps gloo's."""
    c10d = dist.distributed_c10d
    if timeout is not None and dist.get_debug_level() == dist.DebugLevel.DETAIL and c10d._GLOO_AVAILABLE:
        backend = c10d._create_process_group_wrapper(
            wrapped_pg=backend, store_prefix="spmd", store=store, rank=backend.rank(),
            world_size=backend.size(), timeout=timeout)
    return SpmdProcessGroup(store, backend)
