#!/bin/sh
# Install every Debian package spmd needs to build, test and run its demo.
# Idempotent: when everything is already installed it does nothing (and
# needs no network).  Run as root.  Benchmark-only peers are installed by
# bench/install-peers.sh.
set -eu
PKGS="build-essential cmake make pkg-config git libopenblas-dev zlib1g-dev \
dataset-fashion-mnist gnuplot-nox clang libclang-rt-14-dev iproute2 procps valgrind \
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

missing=""
for p in $PKGS; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done
if [ -z "$missing" ]; then
    echo "install-deps: all packages present"
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "install-deps: missing packages:$missing — run this script as root" >&2
    exit 1
fi
echo "install-deps: installing$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing
