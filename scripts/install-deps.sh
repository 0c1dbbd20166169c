#!/bin/sh
# Install every Debian package spmd needs to build, test and run its demo.
# Idempotent: when everything is already installed it does nothing (and
# needs no network).  Run as root.  Benchmark-only peers are installed by
# bench/install-peers.sh.
set -eu
PKGS="build-essential cmake make pkg-config git libopenblas-dev zlib1g-dev \
dataset-fashion-mnist gnuplot-nox clang iproute2 procps valgrind \
python3 libssl-dev"
# spmd-train's checkpoints are checked against PyTorch both ways (tests/train/),
# and the torch backend (bindings/torch, built and tested when torch is found):
# Debian's torch 1.13, its C++ headers, Python's headers, pybind11; pip and
# setuptools for `pip install ./bindings/torch`.
PKGS="$PKGS python3-torch python3-numpy libtorch-dev python3-dev pybind11-dev python3-pip python3-setuptools"
# Open MPI: mpirun launches spmd programs in the suite (tests/mp/test_mpirun.sh),
# and the MPI backend (SPMD_WITH_MPI=ON in CI) is built against its headers and
# tested under its mpirun (tests/mpi.cmake)
PKGS="$PKGS openmpi-bin libopenmpi-dev"
# ccache: make compiles through it (the Makefile), its cache kept in
# /var/cache/spmd/ccache across CI runs
PKGS="$PKGS ccache"
# debootstrap: make check-torch2 builds and tests spmd_torch against torch 2.x
# in a Debian 13 root it makes with it (scripts/torch2-root.sh)
PKGS="$PKGS debootstrap"
# Slurm (slurmctld, slurmd, srun, sbatch; munge comes with it): a one-host
# cluster started by tests/launcher/slurm.sh runs the documented batch scripts.
# No /etc/slurm/slurm.conf is written, so the installed services stay off.
PKGS="$PKGS slurm-wlm"

updated=""
installed=""
# Install those of the packages given that are missing.
install_missing() {
    missing=""
    for p in "$@"; do
        if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
            missing="$missing $p"
        fi
    done
    [ -n "$missing" ] || return 0
    if [ "$(id -u)" != 0 ]; then
        echo "install-deps: missing packages:$missing — run this script as root" >&2
        exit 1
    fi
    echo "install-deps: installing$missing"
    export DEBIAN_FRONTEND=noninteractive
    if [ -z "$updated" ]; then
        apt-get update -qq
        updated=1
    fi
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $missing
    installed=1
}

# shellcheck disable=SC2086
install_missing $PKGS
# clang's sanitizer and fuzzer runtimes: the package matching the clang
# installed (libclang-rt-14-dev on Debian 12, libclang-rt-19-dev on 13).
clang_major=$(clang --version | sed -n 's/.*clang version \([0-9][0-9]*\).*/\1/p' | head -n 1)
[ -n "$clang_major" ] || { echo "install-deps: cannot tell clang's version" >&2; exit 1; }
install_missing "libclang-rt-$clang_major-dev"
[ -n "$installed" ] || echo "install-deps: all packages present"
