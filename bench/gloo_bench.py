"""The torch gloo peer of spmd-bench (benchmarks only).
   python3 bench/gloo_bench.py <world> <min_bytes> <max_bytes> <iters>
Spawns <world> processes with gloo over loopback and prints
"size time_us busbw_GBps" for all_reduce float sum (slowest rank's mean)."""
import os, sys, time
import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def run(rank, world, minb, maxb, iters, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    b = minb
    while b <= maxb:
        x = torch.zeros(max(1, b // 4))
        for _ in range(5):
            dist.all_reduce(x)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(x)
        mean = torch.tensor([(time.perf_counter() - t0) / iters])
        dist.all_reduce(mean, op=dist.ReduceOp.MAX)
        us = mean.item() * 1e6
        if rank == 0:
            print(f"{b} {us:.2f} {b / (us * 1e3) * 2 * (world - 1) / world:.3f}", flush=True)
        b *= 2
    dist.destroy_process_group()


if __name__ == "__main__":
    world, minb, maxb, iters = (int(a) for a in sys.argv[1:5])
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    mp.spawn(run, args=(world, minb, maxb, iters, port), nprocs=world)
