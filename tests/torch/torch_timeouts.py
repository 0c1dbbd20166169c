"""Deadlines and shutdown on the spmd backend, with ranks that do not come:

- monitored_barrier (which torch accepts for gloo alone; spmd_torch lets it
  through) names the rank that did not arrive, or all of them with
  wait_all_ranks, within its timeout, and passes when everyone comes; with
  no time left (timeout 0) rank 0 names every rank not yet arrived; the
  errors are worded as gloo's, which torch's suite matches;
- an operation's own timeout (the options' `timeout`, torch's per-op
  deadline) fails it with a timeout error in about that time, not the group's
  10 minutes, and aborts the group on every rank; Work.wait(timeout) gives up
  waiting and the operation finishes when the peer comes;
- destroy_process_group() with an operation pending on a peer that never
  comes, or that is gone, returns, and the operation fails.

Each case forks fresh ranks (file:// rendezvous: no port to pick).  The
upper bounds on durations are hang guards only (minutes), never timing
assertions.  Runs on torch 1.13 and 2.x."""
import datetime
import multiprocessing
import os
import signal
import sys
import tempfile
import time

import torch
import torch.distributed as dist

import spmd_torch  # noqa: F401  registers "spmd"

GROUP_TIMEOUT = datetime.timedelta(minutes=10)
HANG_GUARD = 240  # seconds: a case still running after this has hung


def init(rank, world, path):
    dist.init_process_group("spmd", init_method="file://" + path, rank=rank,
                            world_size=world, timeout=GROUP_TIMEOUT)


def error_of(fn):
    """(message, seconds) of the RuntimeError fn raises; ("no error", s) else."""
    start = time.monotonic()
    try:
        fn()
    except RuntimeError as e:
        return str(e), time.monotonic() - start
    return "no error", time.monotonic() - start


# ---- the cases: each runs in every rank of a fresh world ---------------------

def monitored(rank, world, path, q, ev, ev2):
    """Rank `world - 1` arrives only after rank 0 has given up; then all pass."""
    init(rank, world, path)
    absent = world - 1
    if rank != absent:
        q.put(("first", rank) + error_of(lambda: dist.monitored_barrier(
            timeout=datetime.timedelta(seconds=3))))
    ev.wait()
    # ranks 1.. stay away from this one: rank 0 names them all
    if rank == 0:
        q.put(("all", rank) + error_of(lambda: dist.monitored_barrier(
            timeout=datetime.timedelta(seconds=2), wait_all_ranks=True)))
    else:
        q.put(("all", rank, "stayed away", 0.0))
    # every rank comes: it passes (the absent rank skipped no barrier of its
    # own, so it counts this one as its first: a different tag from rank 0's
    # third — which is why everyone meets on a fresh group)
    g = dist.new_group(list(range(world)))
    q.put(("pass", rank) + error_of(lambda: dist.monitored_barrier(
        g, timeout=datetime.timedelta(seconds=120))))
    dist.destroy_process_group()


def monitored_no_time(rank, world, path, q, ev, ev2):
    """Rank 0's monitored_barrier with timeout 0, the others away: rank 0
    has no time to wait for anyone (gloo's "Rank 0 timed out")."""
    init(rank, world, path)
    if rank == 0:
        q.put(("zero", rank) + error_of(lambda: dist.monitored_barrier(
            timeout=datetime.timedelta(seconds=0))))
        ev.set()
    else:
        ev.wait()  # still in the group (not gone) while rank 0 looks for them
    dist.destroy_process_group()


def op_timeout(rank, world, path, q, ev, ev2):
    """Rank 1 does not join rank 0's collectives until told."""
    init(rank, world, path)
    t = torch.ones(4)
    if rank == 0:
        # Work.wait(timeout): rank 0 stops waiting; the all_reduce goes on
        w = dist.all_reduce(t, async_op=True)
        q.put(("wait", rank) + error_of(lambda: w.wait(datetime.timedelta(seconds=2))))
        ev.wait()  # rank 1 joins now
        w.wait()
        q.put(("wait-done", rank, str(t.tolist()), 0.0))
        # the operation's own timeout: fails, and aborts the group
        opts = dist.AllreduceOptions()
        opts.timeout = datetime.timedelta(seconds=3)
        q.put(("op", rank) + error_of(
            lambda: dist.group.WORLD.allreduce([torch.ones(4)], opts).wait()))
    else:
        ev.wait()
        dist.all_reduce(t)
        ev2.wait()  # rank 0's all_reduce has timed out: it aborted the group here too
        q.put(("op", rank) + error_of(lambda: dist.barrier()))
    dist.destroy_process_group()


def destroy_pending(rank, world, path, q, ev, ev2, peer_dies):
    """Rank 0 destroys the group with an all_reduce its peer never joins (the
    peer waits, or is killed)."""
    init(rank, world, path)
    dist.all_reduce(torch.ones(2))  # connected
    if rank == 1:
        q.put(("ready", rank, "", 0.0))
        q.close()
        q.join_thread()  # the message is out before the process dies
        if peer_dies:
            os.kill(os.getpid(), signal.SIGKILL)
        ev.wait()  # never set before rank 0 is done
        os._exit(0)
    w = dist.all_reduce(torch.ones(1 << 16), async_op=True)
    fut_w = dist.all_reduce(torch.ones(8), async_op=True)
    fut = fut_w.get_future()
    msg, secs = error_of(dist.destroy_process_group)
    q.put(("destroy", rank, msg, secs))
    q.put(("pending", rank) + error_of(w.wait))
    q.put(("future", rank) + error_of(fut.wait))
    del w, fut_w, fut
    q.put(("released", rank, "", 0.0))


# ---- the driver -----------------------------------------------------------------

def start(fn, world, *args):
    ctx = multiprocessing.get_context("fork")
    q, ev, ev2 = ctx.Queue(), ctx.Event(), ctx.Event()
    path = tempfile.mktemp(prefix="spmd_torch_timeouts_")
    procs = [ctx.Process(target=fn, args=(r, world, path, q, ev, ev2) + args) for r in range(world)]
    for p in procs:
        p.start()
    return procs, q, ev, ev2


def collect(q, n):
    out = {}
    for _ in range(n):
        what, rank, msg, secs = q.get(timeout=HANG_GUARD)
        print(f"  {what} rank {rank}: {secs:.1f} s: {msg}", flush=True)
        out[(what, rank)] = (msg, secs)
    return out


def finish(procs, killed=()):
    for p in procs:
        p.join(HANG_GUARD)
        assert not p.is_alive(), f"process {p.pid} hung"
    codes = [p.exitcode for i, p in enumerate(procs) if i not in killed]
    assert all(c == 0 for c in codes), f"exit codes {codes}"


def check_monitored():
    world = 3
    print("monitored_barrier, rank 2 late:", flush=True)
    procs, q, ev, _ = start(monitored, world)
    r = collect(q, world - 1)
    msg, secs = r[("first", 0)]
    assert "Rank 2 failed to pass monitoredBarrier in 3000 ms" in msg, msg
    assert secs < HANG_GUARD
    msg, _ = r[("first", 1)]
    # gloo's wording (torch's suite matches it), then spmd's cause
    assert "Rank 1 successfully reached monitoredBarrier, but received errors while waiting " \
        "for send/recv from rank 0: rank 0 did not release it within 3000 ms" in msg, msg
    ev.set()
    r = collect(q, 2 * world)
    msg, _ = r[("all", 0)]
    assert "Ranks 1, 2 failed to pass monitoredBarrier in 2000 ms" in msg, msg
    for rank in range(world):
        assert r[("pass", rank)][0] == "no error", r[("pass", rank)]
    finish(procs)


def check_monitored_no_time():
    world = 3
    print("monitored_barrier, timeout 0, ranks 1 and 2 away:", flush=True)
    procs, q, _, _ = start(monitored_no_time, world)
    msg, _ = collect(q, 1)[("zero", 0)]
    assert "[Rank 0]: Rank 0 timed out in monitoredBarrier after 0 ms, with no time left to " \
        "wait for Rank 1 (ranks that did not arrive: 1, 2)" in msg, msg
    finish(procs)


def check_op_timeout():
    world = 2
    print("per-operation timeouts, rank 1 late:", flush=True)
    procs, q, ev, ev2 = start(op_timeout, world)
    msg, secs = collect(q, 1)[("wait", 0)]
    assert "timed out after 2000 ms" in msg and secs < HANG_GUARD, msg
    ev.set()
    r = collect(q, 2)
    assert r[("wait-done", 0)][0] == str([2.0] * 4), r[("wait-done", 0)]
    msg, secs = r[("op", 0)]
    assert "allreduce timed out after 3000 ms" in msg, msg
    assert secs < HANG_GUARD, "the operation's timeout was not honoured"
    ev2.set()
    msg, _ = collect(q, 1)[("op", 1)]
    assert msg != "no error" and "timed out after 3000 ms" in msg, msg
    finish(procs)


def check_destroy(peer_dies):
    world = 2
    print(f"destroy_process_group with an operation pending, peer {'killed' if peer_dies else 'away'}:",
          flush=True)
    procs, q, ev, _ = start(destroy_pending, world, peer_dies)
    r = collect(q, 5)
    assert r[("destroy", 0)][0] == "no error", r[("destroy", 0)]
    assert r[("pending", 0)][0] != "no error", "the pending all_reduce succeeded without its peer"
    assert r[("future", 0)][0] != "no error", "the pending future succeeded without its peer"
    ev.set()
    finish(procs, killed=(1,) if peer_dies else ())


def main():
    check_monitored()
    check_monitored_no_time()
    check_op_timeout()
    check_destroy(peer_dies=False)
    check_destroy(peer_dies=True)
    print("timeouts and shutdown: ok")


if __name__ == "__main__":
    main()
    sys.exit(0)
