"""The README's pip path: `pip install --no-build-isolation ./bindings/torch`
(libspmd built from this source tree, with the MPI backend when Open MPI is
there), into a temporary --target instead of the system's site-packages; then
the installed module alone (no build tree on the path) imports and runs a
2-rank all_reduce.  A module linked without libspmd's dependencies fails at
import (undefined symbol: ompi_mpi_comm_null).

    pip_install.py SOURCE_DIR
"""
import os
import shutil
import subprocess
import sys
import tempfile

CHILD = r"""
import os, sys
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import spmd_torch

def worker(rank, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("spmd", rank=rank, world_size=2)
    t = torch.tensor([rank + 1.0, 10.0])
    dist.all_reduce(t)
    assert t.tolist() == [3.0, 20.0], t
    dist.barrier()
    dist.destroy_process_group()

if __name__ == "__main__":
    site = sys.argv[1]
    assert os.path.realpath(spmd_torch.__file__).startswith(os.path.realpath(site)), spmd_torch.__file__
    sys.path.insert(0, sys.argv[2])
    from seed_util import free_port
    mp.spawn(worker, args=(free_port(),), nprocs=2)
    print("pip_install: all_reduce over the pip-installed spmd_torch ok")
"""


def main():
    src = os.path.abspath(sys.argv[1])
    tmp = tempfile.mkdtemp(prefix="spmd_pip_")
    try:
        site = os.path.join(tmp, "site")
        env = dict(os.environ)
        env.pop("PYTHONPATH", None)
        env["SPMD_BUILD_DIR"] = os.path.join(tmp, "libspmd")
        subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation",
                        "--no-index", "--no-deps", "--quiet", "--target", site,
                        os.path.join(src, "bindings", "torch")], env=env, check=True)
        env["PYTHONPATH"] = site
        env.setdefault("OMP_NUM_THREADS", "1")
        here = os.path.dirname(os.path.abspath(__file__))
        script = os.path.join(tmp, "child.py")
        with open(script, "w") as f:
            f.write(CHILD)
        subprocess.run([sys.executable, script, site, here], env=env, check=True, cwd=tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
