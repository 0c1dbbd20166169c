#!/usr/bin/env python3
"""Run a torch test program on the spmd backend: run.py MODE NPROC SCRIPT [ARGS...]

MODE python   — the script starts its own processes (mp.spawn, Process)
     torchrun — torchrun (torchrun_compat.py), NPROC workers on one node
     spmdrun  — spmdrun --standalone, NPROC workers

SPMDRUN (the spmdrun binary) and SPMD_TORCH_PATH (where spmd_torch is
built) come from ctest.  Exit code: the program's (or the launcher's).
"""
import os
import subprocess
import sys

from seed_util import free_port  # (imports no torch)


def main():
    mode, nproc, script, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (env.get("SPMD_TORCH_PATH"), os.path.dirname(os.path.abspath(script)),
                    env.get("PYTHONPATH")) if p)
    env.setdefault("OMP_NUM_THREADS", "1")
    py = sys.executable
    if mode == "python":
        cmd = [py, script] + args
    elif mode == "torchrun":
        # Debian's torchrun needs fixes to start (torchrun_compat.py).
        wrapper = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torchrun_compat.py")
        cmd = [py, wrapper, "--nnodes", "1", "--nproc_per_node", nproc,
               "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
               "--monitor_interval", "0.1", script] + args
    elif mode == "spmdrun":
        cmd = [env["SPMDRUN"], "--standalone", "--nproc-per-node", nproc, py, script] + args
    else:
        sys.exit(f"run.py: unknown mode {mode}")
    sys.exit(subprocess.call(cmd, env=env))


if __name__ == "__main__":
    main()
