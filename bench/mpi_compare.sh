#!/bin/sh
# all_reduce on the MPI backend against MPI_Allreduce itself and against
# spmd's own transport, in one run: under the same mpirun, spmd-bench with
# SPMD_BACKEND=mpi and bench/mpi_bench.c (MPI_Allreduce), over Open MPI's
# shared memory (vader) and over TCP; and spmd-bench under spmdrun over
# spmd's shared memory and over TCP (SPMD_TRANSPORT=tcp).  Rounds
# interleaved, the best time of the rounds kept per size.
#   bench/mpi_compare.sh [build-dir] [world] [rounds] [max bytes]
# BENCH_LOAD=N runs every configuration with N CPU-bound processes beside it
# (bench/hogs.sh, started alike for each; N = cores: one busy process per
# core), for issue 28's goal: the MPI backend within 1.2x of MPI_Allreduce
# on a busy host.  BENCH_NICE=N runs every configuration under nice -n N.
set -u
BUILD=${1:-build}
W=${2:-2}
R=${3:-3}
MAXB=${4:-67108864}
TMP=$(mktemp -d)
LOAD=${BENCH_LOAD:-0}
. "$(dirname "$0")/hogs.sh"
HOGS_CLEANUP='rm -rf "$TMP"'
hogs_traps
loaded() { hogs_beside "$LOAD" "$@"; } # one configuration beside LOAD busy processes
NICE=""
[ -n "${BENCH_NICE:-}" ] && NICE="nice -n $BENCH_NICE"
root=; [ "$(id -u)" = 0 ] && root=--allow-run-as-root
mpicc -O2 "$(dirname "$0")/mpi_bench.c" -o "$TMP/mpi_bench" || exit 1
B="$BUILD/tools/spmd-bench -o all_reduce -b 4 -e $MAXB -f 4 -n 20 -w 5 -c 0 --outplace-only"
echo "# $(nproc) cores, $(date -u +%Y-%m-%dT%H:%MZ), world $W, $R rounds, load before $(cut -d' ' -f1-3 /proc/loadavg);" \
     "background load: $LOAD CPU-bound process(es)${NICE:+; $NICE}"
for r in $(seq "$R"); do
    for btl in vader tcp; do
        MPIRUN="mpirun $root --oversubscribe --bind-to none -np $W --mca btl $btl,self --mca btl_tcp_if_include lo"
        # shellcheck disable=SC2086
        loaded $NICE $MPIRUN -x SPMD_BACKEND=mpi $B 2>/dev/null > "$TMP/out"
        awk '!/^#/ && NF {print $1, $6}' "$TMP/out" > "$TMP/mpi_$btl.$r"
        # shellcheck disable=SC2086
        loaded $NICE $MPIRUN "$TMP/mpi_bench" allreduce 4 "$MAXB" 20 5 2>/dev/null > "$TMP/out"
        awk 'NF {print $1, $2}' "$TMP/out" > "$TMP/raw_$btl.$r"
    done
    # shellcheck disable=SC2086
    loaded $NICE "$BUILD/tools/spmdrun" --standalone -n "$W" $B 2>/dev/null > "$TMP/out"
    awk '!/^#/ && NF {print $1, $6}' "$TMP/out" > "$TMP/own_shm.$r"
    # shellcheck disable=SC2086
    SPMD_TRANSPORT=tcp loaded $NICE "$BUILD/tools/spmdrun" --standalone -n "$W" $B 2>/dev/null > "$TMP/out"
    awk '!/^#/ && NF {print $1, $6}' "$TMP/out" > "$TMP/own_tcp.$r"
done
echo "# load after $(cut -d' ' -f1-3 /proc/loadavg); time per all_reduce in us (best of the rounds)"
for k in raw_vader mpi_vader own_shm raw_tcp mpi_tcp own_tcp; do
    cat "$TMP/$k".* | awk '{if (!($1 in b) || $2 < b[$1]) b[$1] = $2} END {for (s in b) print s, b[s]}' | sort -k1,1 > "$TMP/$k"
done
printf "%10s %11s %11s %11s %7s %7s %11s %11s %11s %7s %7s\n" bytes MPI_Allred spmd-mpi spmd-shm raw/mpi mpi/own \
    "MPI_A-tcp" spmd-mpi spmd-tcp raw/mpi mpi/own
join "$TMP/raw_vader" "$TMP/mpi_vader" | join - "$TMP/own_shm" | join - "$TMP/raw_tcp" | join - "$TMP/mpi_tcp" |
    join - "$TMP/own_tcp" |
    awk '{printf "%10d %11.2f %11.2f %11.2f %7.2f %7.2f %11.2f %11.2f %11.2f %7.2f %7.2f\n",
          $1, $2, $3, $4, $2/$3, $3/$4, $5, $6, $7, $5/$6, $6/$7}' | sort -n
echo "# vader columns, then TCP: MPI_Allreduce (bench/mpi_bench.c), spmd's all_reduce on the MPI backend, on spmd's"
echo "# own transport; raw/mpi = MPI_Allreduce time / MPI backend time (issue 28's goal: at least 1/1.2 = 0.83),"
echo "# mpi/own = MPI backend time / own transport time (below 1: the MPI backend is faster)"
