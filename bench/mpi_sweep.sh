#!/bin/sh
# The measurements behind the ON_MPI rows of src/coll/select.c: every
# collective's algorithms on a group over MPI — "mpi" (MPI's own, mpi_native.c)
# against spmd's algorithms over MPI point-to-point — with bench/coll_sweep
# under mpirun, over Open MPI's shared memory and over TCP.
#   bench/mpi_sweep.sh [build-dir] [worlds] [max bytes] > sweep.txt
# Output: coll_sweep's lines (fastest of 3 repeats, -m), one block per
# collective, btl and world.
set -u
BUILD=${1:-build}
WORLDS=${2:-"2 4"}
MAXB=${3:-16M}
root=; [ "$(id -u)" = 0 ] && root=--allow-run-as-root
echo "# $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(date -u +%Y-%m-%dT%H:%MZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
for btl in vader tcp; do
    for w in $WORLDS; do
        for c in all_reduce broadcast reduce all_gather reduce_scatter all_to_all gather scatter; do
            case $c in
                all_reduce) a=mpi,rd,rhd,ring ;;
                broadcast) a=mpi,tree,scatter_ring ;;
                reduce) a=mpi,tree ;;
                all_gather) a=mpi,ring,bruck ;;
                reduce_scatter) a=mpi,ring,direct ;;
                all_to_all) a=mpi,pairwise,linear ;;
                gather|scatter) a=mpi,linear,tree ;;
            esac
            echo "## btl $btl"
            # shellcheck disable=SC2086
            mpirun $root --oversubscribe --bind-to none -np "$w" --mca btl "$btl,self" --mca btl_tcp_if_include lo \
                -x SPMD_BACKEND=mpi "$BUILD/bench/coll_sweep" -c "$c" -w "$w" -a "$a" -b 4 -e "$MAXB" -f 4 -r 3 -m
        done
        echo "## btl $btl"
        mpirun $root --oversubscribe --bind-to none -np "$w" --mca btl "$btl,self" --mca btl_tcp_if_include lo \
            -x SPMD_BACKEND=mpi "$BUILD/bench/coll_sweep" -c barrier -w "$w" -a mpi,dissemination -b 4 -e 4 -r 5 -m
    done
done
