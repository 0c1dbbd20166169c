#!/bin/sh
# all_reduce on the MPI backend against spmd's own transport, in one run:
# spmd-bench under mpirun (SPMD_BACKEND=mpi) over Open MPI's shared memory and
# over TCP, and spmd-bench under spmdrun over spmd's shared memory and over
# TCP (SPMD_TRANSPORT=tcp); rounds interleaved, the best time of the rounds
# kept per size.
#   bench/mpi_compare.sh [build-dir] [world] [rounds] [max bytes]
set -u
BUILD=${1:-build}
W=${2:-2}
R=${3:-3}
MAXB=${4:-67108864}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
root=; [ "$(id -u)" = 0 ] && root=--allow-run-as-root
B="$BUILD/tools/spmd-bench -o all_reduce -b 4 -e $MAXB -f 4 -n 20 -w 5 -c 0 --outplace-only"
echo "# $(nproc) cores, $(date -u +%Y-%m-%dT%H:%MZ), world $W, $R rounds, load before $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$R"); do
    for btl in vader tcp; do
        # shellcheck disable=SC2086
        mpirun $root --oversubscribe --bind-to none -np "$W" --mca btl "$btl,self" --mca btl_tcp_if_include lo \
            -x SPMD_BACKEND=mpi $B 2>/dev/null | awk '!/^#/ && NF {print $1, $6}' > "$TMP/mpi_$btl.$r"
    done
    # shellcheck disable=SC2086
    "$BUILD/tools/spmdrun" --standalone -n "$W" $B 2>/dev/null | awk '!/^#/ && NF {print $1, $6}' > "$TMP/own_shm.$r"
    # shellcheck disable=SC2086
    SPMD_TRANSPORT=tcp "$BUILD/tools/spmdrun" --standalone -n "$W" $B 2>/dev/null \
        | awk '!/^#/ && NF {print $1, $6}' > "$TMP/own_tcp.$r"
done
echo "# load after $(cut -d' ' -f1-3 /proc/loadavg); time per all_reduce in us (best of the rounds)"
for k in mpi_vader own_shm mpi_tcp own_tcp; do
    cat "$TMP/$k".* | awk '{if (!($1 in b) || $2 < b[$1]) b[$1] = $2} END {for (s in b) print s, b[s]}' | sort -n > "$TMP/$k"
done
printf "%12s %12s %12s %9s %12s %12s %9s\n" bytes mpi-shm spmd-shm ratio mpi-tcp spmd-tcp ratio
join "$TMP/mpi_vader" "$TMP/own_shm" | join - "$TMP/mpi_tcp" | join - "$TMP/own_tcp" |
    awk '{printf "%12d %12.2f %12.2f %9.2f %12.2f %12.2f %9.2f\n", $1, $2, $3, $2/$3, $4, $5, $4/$5}'
echo "# ratio = time over MPI / time over spmd's own transport (below 1: MPI is faster)"
