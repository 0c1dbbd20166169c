"""Make a process group torch's default group, for spmd_torch.elastic: after
a recovery or a grow the new group takes the old default's place, and a
joiner's group becomes its default, so that collectives without group=,
get_rank(), get_world_size(), barrier() and DDP without process_group= act
on the new world.

torch has no public call for this (init_process_group refuses a second
default group and destroy_process_group drops every group), so this does
what init_process_group does to torch.distributed.distributed_c10d's tables:
module-level dicts on torch 1.13, the _World object on torch 2.x, where the
group's name is also registered for functional collectives and DeviceMesh.
Each table is looked up by name and skipped when this torch lacks it.
"""
import torch.distributed as dist

c10d = dist.distributed_c10d

# What torch names the default group when it makes it (_process_group_name
# on torch 2.x counts from "0"); used on a joiner, which never had one.
_JOINER_NAME = "0"


def is_default(pg):
    """Is pg torch's default group?"""
    return dist.is_initialized() and pg is c10d._get_default_group()


def _tables():
    world = getattr(c10d, "_world", None)
    if world is not None:  # torch 2.x
        return world, world.pg_map, world.pg_names, world.pg_group_ranks
    return None, c10d._pg_map, c10d._pg_names, c10d._pg_group_ranks


def replace_default(old, new):
    """new becomes torch's default group, in old's place (old: None on a
    joiner, which has no default group yet).  old leaves torch's tables."""
    world, pg_map, names, ranks = _tables()
    backend, store = pg_map.pop(old, ("spmd", None)) if old is not None else ("spmd", None)
    name = names.pop(old, None) if old is not None else None
    name = name or _JOINER_NAME
    ranks.pop(old, None)
    if world is not None:
        config = world.pg_backend_config.pop(old, "cpu:spmd") if old is not None else "cpu:spmd"
        tag = world.pg_to_tag.pop(old, None) if old is not None else None
        tag = tag or f"ptd:{name}"
        for pgs in world.tags_to_pg.values():
            if old in pgs:
                pgs.remove(old)
        world.tags_to_pg.setdefault(tag, []).append(new)
        if tag.startswith("ptd:"):
            world.tags_to_pg.setdefault("", []).append(new)
        world.pg_to_tag[new] = tag
        world.pg_backend_config[new] = config
        if old is not None:
            c10d._unregister_process_group(name)
        new._set_group_name(name)
        new._set_group_desc("default_pg")
        c10d._register_process_group(name, new)
    pg_map[new] = (backend, store)
    names[new] = name
    ranks[new] = {i: i for i in range(new.size())}
    c10d._update_default_pg(new)
    if getattr(c10d, "_backend", "spmd") is None:  # torch 1.13's record of the default's backend
        c10d._backend = backend
