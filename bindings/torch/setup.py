"""pip install ./bindings/torch — the spmd_torch Python module.

Offline, against Debian's python3-torch / libtorch-dev (no build isolation:
torch must come from the system):

    pip install --no-build-isolation --break-system-packages ./bindings/torch

libspmd comes from, in this order: SPMD_LIB_DIR (a CMake build dir holding
libspmd.a and spmd.pc) with SPMD_INCLUDE_DIR; an installed spmd found by
pkg-config; else libspmd.a is built from this source tree with CMake (target
spmd_static, in SPMD_BUILD_DIR or bindings/torch/build/libspmd).  It is linked
statically into the extension, with what spmd.pc says it needs (Open MPI when
built with the MPI backend, libcrypto).
"""
import os
import subprocess

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))


def pkg_config(*args, path=None):
    env = dict(os.environ)
    if path:
        env["PKG_CONFIG_PATH"] = os.pathsep.join(p for p in (path, env.get("PKG_CONFIG_PATH")) if p)
    try:
        return subprocess.run(["pkg-config", *args, "spmd"], check=True, capture_output=True,
                              text=True, env=env).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        return None


def static_deps(path=None):
    """What linking libspmd.a needs besides the archive itself, from the spmd.pc
    next to it (a CMake build dir writes one) or installed: MPI when libspmd was
    built with the MPI backend, libcrypto, pthread, libm.  Without them the
    module loads with undefined symbols (ompi_mpi_comm_null)."""
    flags = pkg_config("--libs", path=path)
    libdir = pkg_config("--variable=libdir", path=path)
    if flags is None or libdir is None:
        raise SystemExit("spmd_torch: pkg-config cannot read spmd.pc" +
                         (" in " + path if path else "") +
                         " (Debian: apt-get install pkg-config; an MPI-enabled libspmd also "
                         "needs libopenmpi-dev)")
    own = {"-lspmd"} | {f + d for d in libdir for f in ("-L", "-Wl,-rpath,")}
    # spmd.pc's Requires.private / Libs.private, linked shared: --static would
    # also ask for libcrypto's own static dependencies (-lzstd on Debian 13).
    return [f for f in flags if f not in own] + ["-lcrypto", "-lpthread", "-lm"]


def libspmd():
    """(include dirs, extra objects, link args)."""
    lib_dir = os.environ.get("SPMD_LIB_DIR")
    if lib_dir:
        inc = os.environ.get("SPMD_INCLUDE_DIR", os.path.join(ROOT, "include"))
        return [inc], [os.path.join(lib_dir, "libspmd.a")], static_deps(lib_dir)
    cflags, libs = pkg_config("--cflags"), pkg_config("--libs", "--static")
    if cflags is not None and libs is not None:
        incs = [f[2:] for f in cflags if f.startswith("-I")]
        libdirs = [f[2:] for f in libs if f.startswith("-L")]
        archive = [os.path.join(d, "libspmd.a") for d in libdirs
                   if os.path.exists(os.path.join(d, "libspmd.a"))]
        if archive:
            return incs, archive[:1], static_deps()
        return incs, [], libs + ["-Wl,-rpath," + d for d in libdirs]
    if not os.path.exists(os.path.join(ROOT, "include", "spmd", "group.h")):
        raise SystemExit("spmd_torch: no libspmd (set SPMD_LIB_DIR, install spmd, or build "
                         "from the spmd source tree)")
    # SPMD_BUILD_DIR: where libspmd is built (tests keep concurrent builds apart).
    build = os.environ.get("SPMD_BUILD_DIR") or os.path.join(HERE, "build", "libspmd")
    subprocess.run(["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                    "-DSPMD_WITH_TORCH=OFF"], check=True)
    subprocess.run(["cmake", "--build", build, "--target", "spmd_static", "-j2"], check=True)
    return [os.path.join(ROOT, "include")], [os.path.join(build, "libspmd.a")], static_deps(build)


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
