#!/bin/sh
# One rank of spmd-bench under mpirun (tests/mpi.cmake): it must run on the
# MPI backend, which rank 0's header says.
#   bench_rank.sh <spmd-bench> [options...]
out=$("$@") || { echo "$out"; exit 1; }
[ "${OMPI_COMM_WORLD_RANK:-0}" != 0 ] && exit 0
echo "$out" | grep -q "(backend mpi)" || { echo "not on the MPI backend:"; echo "$out"; exit 1; }
