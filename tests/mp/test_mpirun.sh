#!/bin/sh
# spmd programs run directly under Open MPI's mpirun (no spmdrun): the group
# reads OMPI_COMM_WORLD_*; all ranks are local, so the master is 127.0.0.1.
# Skipped (77) where Open MPI is not installed (it is a benchmark peer only).
#   test_mpirun.sh <netns_worker binary>
command -v mpirun >/dev/null 2>&1 || { echo "SKIP: mpirun not installed"; exit 77; }
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
# The job secret every rank proves (spmdrun would generate it; mpirun users export one).
SPMD_AUTH_TOKEN=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n'); export SPMD_AUTH_TOKEN
exec timeout 120 mpirun --allow-run-as-root --oversubscribe -np 3 -x MASTER_PORT=$PORT -x SPMD_TIMEOUT=60 -x SPMD_AUTH_TOKEN "$1"
