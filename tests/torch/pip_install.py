"""The README's pip path: `pip install --no-build-isolation ./bindings/torch`
(libspmd built from this source tree, with the MPI backend when Open MPI is
there), into a temporary --target instead of the system's site-packages; then
the installed module alone (no build tree on the path) imports and runs a
2-rank all_reduce.  A module linked without libspmd's dependencies fails at
import (undefined symbol: ompi_mpi_comm_null).

    pip_install.py SOURCE_DIR

pip builds a wheel and installs it; the build (libspmd and the module, about
3 minutes of CPU) is the same for the same inputs, so the wheel is kept in
$SPMD_CACHE/torch-wheels (default /var/cache/spmd, when it can be written;
the torch 2.x root has its own) under a key of every file that goes into it
(bindings/torch, src, include, cmake, CMakeLists.txt) and the versions of
the compilers, CMake, Python and torch.  With no cache, or a key not there,
the wheel is built with `pip wheel` first (the same build `pip install`
runs); either way it is installed with pip into a temporary --target and
used from there alone.
"""
import glob
import hashlib
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


def tool_version(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True).stdout.strip()
    except OSError:
        return "none"


def wheel_key(src):
    """Hash of what the wheel is made of: the sources and the tools."""
    h = hashlib.sha256()
    tops = ["CMakeLists.txt", "cmake", "include", "src", os.path.join("bindings", "torch")]
    for top in tops:
        for root, dirs, files in os.walk(os.path.join(src, top)):
            dirs[:] = sorted(d for d in dirs if d not in ("build", "__pycache__") and not d.endswith(".egg-info"))
            for name in sorted(files):
                path = os.path.join(root, name)
                h.update(os.path.relpath(path, src).encode() + b"\0")
                with open(path, "rb") as f:
                    h.update(hashlib.sha256(f.read()).digest())
    import torch  # (only its version: the build imports it too)
    for v in (sys.version, torch.__version__, tool_version(["c++", "--version"]),
              tool_version(["cc", "--version"]), tool_version(["cmake", "--version"]),
              tool_version(["pkg-config", "--modversion", "ompi-c"])):
        h.update(v.encode() + b"\0")
    return h.hexdigest()[:32]


def cache_dir():
    """$SPMD_CACHE/torch-wheels when it can be written, else None."""
    d = os.path.join(os.environ.get("SPMD_CACHE", "/var/cache/spmd"), "torch-wheels")
    try:
        os.makedirs(d, exist_ok=True)
    except OSError:
        return None
    return d if os.access(d, os.W_OK) else None


def wheel(src, tmp, env):
    """The wheel for this tree: from the cache, or built (and then kept)."""
    cache = cache_dir()
    key = wheel_key(src)
    kept = os.path.join(cache, key) if cache else None
    if kept:
        found = glob.glob(os.path.join(kept, "spmd_torch-*.whl"))
        if found:
            print("pip_install: wheel from the cache", found[0])
            return found[0]
    out = os.path.join(tmp, "wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-index", "--no-deps",
                    "--quiet", "--wheel-dir", out, os.path.join(src, "bindings", "torch")], env=env, check=True)
    built = glob.glob(os.path.join(out, "spmd_torch-*.whl"))
    if len(built) != 1:
        raise SystemExit("pip_install: pip wheel made %s" % (built or "no wheel"))
    if kept:
        # Appears whole (rename) for concurrent runs; a lost race keeps the other one.
        part = tempfile.mkdtemp(prefix=key + ".part-", dir=cache)
        os.chmod(part, 0o755)
        shutil.copy(built[0], part)
        try:
            os.rename(part, kept)
        except OSError:
            shutil.rmtree(part, ignore_errors=True)
    return built[0]


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
                        wheel(src, tmp, env)], env=env, check=True)
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
