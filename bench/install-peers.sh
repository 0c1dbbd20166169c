#!/bin/sh
# The peers spmd is measured against (benchmarks only; never needed to build
# or test spmd): Open MPI (mpicc, mpirun), MPICH 4 (mpicc.mpich,
# mpirun.mpich; Open MPI stays the default mpicc/mpirun) and PyTorch (gloo,
# torchrun, DDP).
set -eu
if [ "$(id -u)" != 0 ]; then echo "run as root" >&2; exit 1; fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends openmpi-bin libopenmpi-dev mpich libmpich-dev \
    python3-torch hyperfine
