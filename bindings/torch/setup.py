"""pip install ./bindings/torch — the spmd_torch Python module.

Offline, against Debian's python3-torch / libtorch-dev (no build isolation:
torch must come from the system):

    pip install --no-build-isolation --break-system-packages ./bindings/torch

libspmd comes from, in this order: SPMD_LIB_DIR (a directory holding
libspmd.a, e.g. a CMake build dir) with SPMD_INCLUDE_DIR; an installed spmd
found by pkg-config; else libspmd.a is built here from this source tree with
CMake (target spmd_static).  It is linked statically into the extension.
"""
import os
import subprocess

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))


def pkg_config(*args):
    try:
        return subprocess.run(["pkg-config", *args, "spmd"], check=True, capture_output=True,
                              text=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        return None


def libspmd():
    """(include dirs, extra objects, link args)."""
    lib_dir = os.environ.get("SPMD_LIB_DIR")
    if lib_dir:
        inc = os.environ.get("SPMD_INCLUDE_DIR", os.path.join(ROOT, "include"))
        return [inc], [os.path.join(lib_dir, "libspmd.a")], []
    cflags, libs = pkg_config("--cflags"), pkg_config("--libs", "--static")
    if cflags is not None and libs is not None:
        incs = [f[2:] for f in cflags if f.startswith("-I")]
        libdirs = [f[2:] for f in libs if f.startswith("-L")]
        archive = [os.path.join(d, "libspmd.a") for d in libdirs
                   if os.path.exists(os.path.join(d, "libspmd.a"))]
        if archive:
            return incs, archive[:1], []
        return incs, [], libs + ["-Wl,-rpath," + d for d in libdirs]
    if not os.path.exists(os.path.join(ROOT, "include", "spmd", "group.h")):
        raise SystemExit("spmd_torch: no libspmd (set SPMD_LIB_DIR, install spmd, or build "
                         "from the spmd source tree)")
    build = os.path.join(HERE, "build", "libspmd")
    subprocess.run(["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                    "-DSPMD_WITH_TORCH=OFF"], check=True)
    subprocess.run(["cmake", "--build", build, "--target", "spmd_static", "-j2"], check=True)
    return [os.path.join(ROOT, "include")], [os.path.join(build, "libspmd.a")], []


incs, objs, link = libspmd()
setup(
    name="spmd_torch",
    version="0.1.0",
    description="spmd as a torch.distributed backend (init_process_group(\"spmd\"))",
    packages=["spmd_torch"],
    ext_modules=[CppExtension(
        "spmd_torch._C",
        sorted(os.path.join("csrc", f) for f in os.listdir(os.path.join(HERE, "csrc"))
               if f.endswith(".cpp")),
        include_dirs=incs,
        extra_objects=objs,
        extra_link_args=link + ["-pthread"],
        extra_compile_args=["-O2", "-fvisibility=hidden"])],
    cmdclass={"build_ext": BuildExtension},
)
