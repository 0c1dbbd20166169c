"""torch.distributed.rpc measured the way `spmd-bench -o rpc` measures spmd's
RPC: two workers on this host (TensorPipe), worker0 calls worker1.
Usage: python3 bench/rpc_torch.py [iters]   (bench/rpc_compare.sh runs both)."""
import os
import socket
import sys
import time

import torch
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp


def noop():
    return None


def echo(t):
    return t


def make():
    return torch.zeros(4)


def run(rank, port, iters):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    t0 = time.perf_counter()
    rpc.init_rpc(f"worker{rank}", rank=rank, world_size=2)
    t_start = time.perf_counter() - t0
    if rank == 0:
        print("# torch.distributed.rpc (TensorPipe): worker0 calls worker1")
        print("# %10s %12s %12s" % ("size (B)", "rpc_sync (us)", "GB/s"))

        def timed(fn, args, n):
            for _ in range(n // 10 + 2):
                rpc.rpc_sync("worker1", fn, args=args)
            t = time.perf_counter()
            for _ in range(n):
                rpc.rpc_sync("worker1", fn, args=args)
            return (time.perf_counter() - t) / n

        t = timed(noop, (), iters)
        print("  %10d %12.1f %12s" % (0, t * 1e6, "-"))
        b = 4
        while b <= 4 << 20:
            x = torch.zeros(b // 4)
            n = max(iters // 10, 20) if b >= 1 << 20 else iters
            t = timed(echo, (x,), n)
            print("  %10d %12.1f %12.3f" % (b, t * 1e6, b / t * 1e-9))
            b *= 4
        window, total = 64, iters * 20
        t = time.perf_counter()
        futs = []
        for i in range(total):
            futs.append(rpc.rpc_async("worker1", noop))
            if len(futs) >= window:
                futs.pop(0).wait()
        for f in futs:
            f.wait()
        print("# rpc_async no-op, %d in flight: %.0f calls/s" % (window, total / (time.perf_counter() - t)))
        n = max(iters // 5, 20)
        t = time.perf_counter()
        for _ in range(n):
            rpc.remote("worker1", make).to_here()
        print("# remote + to_here: %.1f us" % ((time.perf_counter() - t) / n * 1e6))
    t0 = time.perf_counter()
    rpc.shutdown()
    t_stop = time.perf_counter() - t0
    if rank == 0:
        print("# start %.1f ms + shutdown %.1f ms = %.1f ms" % (t_start * 1e3, t_stop * 1e3, (t_start + t_stop) * 1e3))
        sys.stdout.flush()


if __name__ == "__main__":
    iters = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    mp.spawn(run, args=(port, iters), nprocs=2, join=True)
