#!/bin/sh
# All-reduce and ping-pong, spmd against its peers in the same run:
# Open MPI over TCP (--mca btl tcp,self), Open MPI over shared memory
# (--mca btl vader,self), MPICH 4 (ch4, shared memory on one host), Open MPI 5
# (Debian 13's, in the root of scripts/torch2-root.sh: ob1 over sm),
# torch gloo.
#   bench/compare.sh [build-dir] [world] [iters] [rounds]
# Needs bench/install-peers.sh; a missing peer is skipped with a note.  Open
# MPI 5 needs root and the Debian 13 root made (scripts/torch2-root.sh ensure;
# `make check` makes it); BENCH_OMPI5=0 leaves it out.
# bench/compare_load.sh runs this at worlds 2, 4 and 8, idle and loaded.
#
# BENCH_LOAD=N measures under controlled background load: N CPU-bound
# processes (bench/hogs.sh: busy loops, unpinned, bounded, ended on any exit)
# are started before each configuration's run and stopped after it, the same
# way for every peer.  BENCH_LOAD=2 on 2 cores is one busy process per core,
# 4 two per core.
#
# rounds (default 1): spmd, Open MPI TCP and Open MPI shm run in turn, once
# per round, so all see the same machine; every size shows its median over
# the rounds (gloo, slow, runs in the first round only).  Both benchmarks
# measure alike (bench/mpi_bench.c): all_reduce, the slowest rank's mean
# over the iterations after 5 warm-ups; ping-pong, rank 0's timed loop of
# round trips after 20 warm-ups, half of it per round trip.
#
# Binding: mpirun pins each rank to a core when there are no more ranks than
# cores (its default, --bind-to core); spmd's ranks get the same with
# SPMD_BIND=core then.  With more ranks than cores neither side binds,
# unless BENCH_BIND=core: then both bind rank r to core r mod cores (spmd's
# SPMD_BIND=core, mpirun's --bind-to core:overload-allowed).  Unbound, how
# the ranks first fall on the cores sets a run's small-message figures for
# both (2x apart from run to run at 8 ranks on 2 cores).
# BENCH_NICE=N runs every configuration under `nice -n N`, to keep other
# jobs on a shared machine from dominating the figures (alike for all).
# BENCH_MAX_BYTES=N stops at N bytes (default 64 MiB): small sizes with many
# iterations (with ranks outnumbering cores, a handful of iterations measures
# how the scheduler happened to interleave the ranks, not the library);
# BENCH_PP_ITERS=N round trips per ping-pong size (default 200).
# MPI_BENCH_THREADS=multiple: Open MPI with MPI_THREAD_MULTIPLE (any thread
# may call, as with spmd); by default it runs with one calling thread.
# BENCH_MIN_MS=M times every size for at least M ms (spmd-bench --min-ms,
# MPI_BENCH_MIN_MS for the MPIs; gloo keeps the fixed counts): the iteration
# counts are then minimums.  Beside busy processes a round of a few hundred
# microseconds shows whether the scheduler preempted it, not the rate a long
# job gets.
set -u
BUILD=${1:-build}
W=${2:-2}
IT=${3:-20}
ROUNDS=${4:-1}
MAXB=${BENCH_MAX_BYTES:-$((64 * 1024 * 1024))}
PPMAX=$((16 * 1024 * 1024))
[ "$MAXB" -lt "$PPMAX" ] && PPMAX=$MAXB
PPIT=${BENCH_PP_ITERS:-200}
MINMS=${BENCH_MIN_MS:-0}
case "$MINMS" in ''|*[!0-9]*) echo "compare.sh: BENCH_MIN_MS must be a whole number of ms, not '$MINMS'" >&2; exit 2 ;; esac
export MPI_BENCH_MIN_MS=$MINMS
TMP=$(mktemp -d)
LOAD=${BENCH_LOAD:-0}
. "$(dirname "$0")/hogs.sh"
HOGS_CLEANUP='rm -rf "$TMP"'
hogs_traps
# loaded CMD...: run one configuration with BENCH_LOAD busy processes beside
# it (not in a pipeline: the hogs must be this shell's)
loaded() { hogs_beside "$LOAD" "$@"; } # one configuration beside LOAD busy processes
NICE=""
[ -n "${BENCH_NICE:-}" ] && NICE="nice -n $BENCH_NICE"
BIND=none
MPIBIND=""
[ "$W" -le "$(nproc)" ] && BIND=core
if [ "${BENCH_BIND:-}" = core ] && [ "$W" -gt "$(nproc)" ]; then
    BIND=core
    MPIBIND="--bind-to core:overload-allowed"
fi
echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(grep -o -w -m1 'avx512f' /proc/cpuinfo || grep -o -w -m1 avx2 /proc/cpuinfo), $(date -u +%Y-%m-%d)"
echo "# load average at start: $(cut -d' ' -f1-3 /proc/loadavg); ranks bound to cores: $BIND; rounds: $ROUNDS${NICE:+; $NICE}${MPI_BENCH_THREADS:+; Open MPI threads: $MPI_BENCH_THREADS}; background load: $LOAD CPU-bound process(es)"
MINTXT=""
[ "$MINMS" -gt 0 ] && MINTXT=" (at least, and at least $MINMS ms a size)"
echo "# all_reduce float sum, world $W, busbw GB/s (time us), slowest rank's mean of $IT iterations$MINTXT, median of $ROUNDS round(s)"

MPIRUN="mpirun --allow-run-as-root --oversubscribe $MPIBIND -x MPI_BENCH_MIN_MS"
# MPI_BENCH_THREADS=multiple: Open MPI initialised with MPI_THREAD_MULTIPLE,
# the guarantee spmd always gives (bench/mpi_bench.c)
[ -n "${MPI_BENCH_THREADS:-}" ] && MPIRUN="$MPIRUN -x MPI_BENCH_THREADS"
HAVE_MPI=0
if command -v mpicc >/dev/null 2>&1; then
    mpicc -O2 "$(dirname "$0")/mpi_bench.c" -o "$TMP/mpi_bench" && HAVE_MPI=1
fi
[ "$HAVE_MPI" = 1 ] || echo "# (Open MPI not installed: skipped)"
# MPICH 4 (Debian's mpich: mpicc.mpich, mpirun.mpich, beside Open MPI);
# its launcher binds as mpirun does when Open MPI's does
HAVE_MPICH=0
MPICHRUN="mpirun.mpich -genv MPI_BENCH_MIN_MS $MINMS"
[ "$BIND" = core ] && MPICHRUN="$MPICHRUN -bind-to core"
if command -v mpicc.mpich >/dev/null 2>&1 && command -v mpirun.mpich >/dev/null 2>&1; then
    mpicc.mpich -O2 "$(dirname "$0")/mpi_bench.c" -o "$TMP/mpich_bench" && HAVE_MPICH=1
fi
[ "$HAVE_MPICH" = 1 ] || echo "# (MPICH not installed: skipped)"
[ -n "${MPI_BENCH_THREADS:-}" ] && MPICHRUN="$MPICHRUN -genv MPI_BENCH_THREADS $MPI_BENCH_THREADS"
# Open MPI 5 (Debian 13's openmpi, in the torch 2.x root, which holds it):
# built and run inside the root (a private mount namespace, same processes and
# cores as the others, so the busy processes weigh on it alike); mpirun binds
# as Open MPI 4.1's does.  Its time to enter the root is outside the timing.
# BENCH_OMPI5_MCA: its transport (default ob1 over sm, vader's successor: the
# same path as the ompi-shm column; "" leaves the choice to Open MPI 5, UCX).
HAVE_OMPI5=0
ROOTSH="$(cd "$(dirname "$0")/.." && pwd)/scripts/torch2-root.sh"
OMPI5RUN="$ROOTSH run -b $TMP -- mpirun --allow-run-as-root --oversubscribe $MPIBIND -x MPI_BENCH_MIN_MS=$MINMS \
${BENCH_OMPI5_MCA---mca pml ob1 --mca btl sm,self}"
[ -n "${MPI_BENCH_THREADS:-}" ] && OMPI5RUN="$OMPI5RUN -x MPI_BENCH_THREADS=$MPI_BENCH_THREADS"
if [ "${BENCH_OMPI5:-1}" != 0 ] && [ "$(id -u)" = 0 ] && [ -f "$("$ROOTSH" path)/.spmd-ready" ]; then
    cp "$(dirname "$0")/mpi_bench.c" "$TMP/mpi_bench.c"
    "$ROOTSH" run -b "$TMP" -- mpicc -O2 "$TMP/mpi_bench.c" -o "$TMP/ompi5_bench" >/dev/null 2>&1 && HAVE_OMPI5=1
fi
[ "$HAVE_OMPI5" = 1 ] && echo "# Open MPI 5: $("$ROOTSH" run -b "$TMP" -- mpirun --version 2>/dev/null | head -n 1)," \
    "${BENCH_OMPI5_MCA---mca pml ob1 --mca btl sm,self}"
[ "$HAVE_OMPI5" = 1 ] || echo "# (Open MPI 5 skipped: BENCH_OMPI5=0, not root, or no Debian 13 root: scripts/torch2-root.sh ensure)"
: > "$TMP/spmd"; : > "$TMP/mpitcp"; : > "$TMP/mpishm"; : > "$TMP/mpich"; : > "$TMP/ompi5"; : > "$TMP/gloo"
for r in $(seq "$ROUNDS"); do
    SPMD_BIND=$BIND loaded $NICE "$BUILD/tools/spmd-bench" --np "$W" -o all_reduce -b 4 -e $MAXB -f 2 -n "$IT" -w 5 -c 0 \
        --outplace-only -T "$MINMS" > "$TMP/out"
    awk '!/^#/ && NF {print $1, $6, $8}' "$TMP/out" >> "$TMP/spmd"
    if [ "$HAVE_MPI" = 1 ]; then
        loaded $NICE $MPIRUN -np "$W" --mca btl tcp,self "$TMP/mpi_bench" allreduce 4 $MAXB "$IT" 5 2>/dev/null >> "$TMP/mpitcp"
        loaded $NICE $MPIRUN -np "$W" --mca btl vader,self "$TMP/mpi_bench" allreduce 4 $MAXB "$IT" 5 2>/dev/null >> "$TMP/mpishm"
    fi
    if [ "$HAVE_MPICH" = 1 ]; then
        loaded $NICE $MPICHRUN -np "$W" "$TMP/mpich_bench" allreduce 4 $MAXB "$IT" 5 2>/dev/null >> "$TMP/mpich"
    fi
    if [ "$HAVE_OMPI5" = 1 ]; then
        loaded $NICE $OMPI5RUN -np "$W" "$TMP/ompi5_bench" allreduce 4 $MAXB "$IT" 5 2>/dev/null >> "$TMP/ompi5"
    fi
done
# Debian's torch lives in the system python (a pyenv python3 may shadow it).
PY=${SPMD_PYTHON:-/usr/bin/python3}
if "$PY" -c "import torch" 2>/dev/null; then
    loaded $NICE "$PY" "$(dirname "$0")/gloo_bench.py" "$W" 4 $MAXB "$IT" > "$TMP/gloo" 2>/dev/null
else
    echo "# (python3-torch not installed: gloo skipped)"
fi

# median over rounds of each size: "size time bw" lines -> "size time bw"
median() {
    sort -n -k1,1 -k2,2 "$1" | awk '{t[$1] = t[$1] " " $2; b[$1] = b[$1] " " $3; n[$1]++}
        END {for (s in t) {k = split(t[s], x, " "); split(b[s], y, " "); m = int((k + 1) / 2);
             print s, x[m], y[m]}}' | sort -n
}
for f in spmd mpitcp mpishm mpich ompi5 gloo; do median "$TMP/$f" > "$TMP/$f.med"; done

printf "%12s %20s %20s %20s %20s %20s %20s %9s %9s %9s %9s %9s\n" bytes spmd "ompi-tcp" "ompi-shm" mpich ompi5 gloo \
    "vs shm" "vs mpich" "vs ompi5" "vs tcp" "vs gloo"
awk 'FNR==1{f++} f==1{s[$1]=$2; sb[$1]=$3; order[++n]=$1} f==2{t[$1]=$2; tb[$1]=$3} f==3{m[$1]=$2; mb[$1]=$3}
     f==4{c[$1]=$2; cb[$1]=$3} f==5{o[$1]=$2; ob[$1]=$3} f==6{g[$1]=$2; gb[$1]=$3}
     function cell(have, bw, us) { return have ? sprintf("%8.3f(%10.2f)", bw, us) : sprintf("%20s", "-") }
     function ratio(have, peer, mine) { return have && mine > 0 ? sprintf("%.2fx", peer / mine) : "-" }
     END {for (i = 1; i <= n; i++) {b = order[i];
        printf "%12d %20s %20s %20s %20s %20s %20s %9s %9s %9s %9s %9s\n", b, cell(1, sb[b], s[b]), cell(b in t, tb[b], t[b]),
          cell(b in m, mb[b], m[b]), cell(b in c, cb[b], c[b]), cell(b in o, ob[b], o[b]), cell(b in g, gb[b], g[b]),
          ratio(b in m, m[b], s[b]), ratio(b in c, c[b], s[b]), ratio(b in o, o[b], s[b]), ratio(b in t, t[b], s[b]),
          ratio(b in g, g[b], s[b])}}' \
    "$TMP/spmd.med" "$TMP/mpitcp.med" "$TMP/mpishm.med" "$TMP/mpich.med" "$TMP/ompi5.med" "$TMP/gloo.med"
echo "# ratios are time(peer)/time(spmd): above 1 means spmd is faster"

if [ "$W" = 2 ]; then
    echo
    echo "# ping-pong, half round trip us (bandwidth GB/s), $PPIT round trips$MINTXT after 20 warm-ups, median of $ROUNDS round(s)"
    : > "$TMP/pp"; : > "$TMP/pptcp"; : > "$TMP/ppshm"; : > "$TMP/ppmpich"; : > "$TMP/ppompi5"
    for r in $(seq "$ROUNDS"); do
        SPMD_BIND=$BIND loaded $NICE "$BUILD/tools/spmd-bench" --np 2 -o pingpong -b 4 -e $PPMAX -f 4 -n $PPIT -w 20 \
            -T "$MINMS" > "$TMP/out"
        awk '!/^#/ && NF {print $1, $2, $3}' "$TMP/out" >> "$TMP/pp"
        if [ "$HAVE_MPI" = 1 ]; then
            loaded $NICE $MPIRUN -np 2 --mca btl tcp,self "$TMP/mpi_bench" pingpong 4 $PPMAX $PPIT 20 2>/dev/null >> "$TMP/pptcp"
            loaded $NICE $MPIRUN -np 2 --mca btl vader,self "$TMP/mpi_bench" pingpong 4 $PPMAX $PPIT 20 2>/dev/null >> "$TMP/ppshm"
        fi
        if [ "$HAVE_MPICH" = 1 ]; then
            loaded $NICE $MPICHRUN -np 2 "$TMP/mpich_bench" pingpong 4 $PPMAX $PPIT 20 2>/dev/null >> "$TMP/ppmpich"
        fi
        if [ "$HAVE_OMPI5" = 1 ]; then
            loaded $NICE $OMPI5RUN -np 2 "$TMP/ompi5_bench" pingpong 4 $PPMAX $PPIT 20 2>/dev/null >> "$TMP/ppompi5"
        fi
    done
    for f in pp pptcp ppshm ppmpich ppompi5; do median "$TMP/$f" > "$TMP/$f.med"; done
    printf "%12s %22s %22s %22s %22s %22s %9s %9s %9s %9s\n" bytes spmd "ompi-tcp" "ompi-shm" mpich ompi5 \
        "vs shm" "vs mpich" "vs ompi5" "vs tcp"
    awk 'FNR==1{f++} f==1{s[$1]=$2; sb[$1]=$3; o[++n]=$1} f==2{t[$1]=$2; tb[$1]=$3} f==3{m[$1]=$2; mb[$1]=$3}
         f==4{c[$1]=$2; cb[$1]=$3} f==5{v[$1]=$2; vb[$1]=$3}
         function cell(have, us, bw) { return have ? sprintf("%10.2f (%7.3f)", us, bw) : sprintf("%22s", "-") }
         function ratio(have, peer, mine) { return have && mine > 0 ? sprintf("%.2fx", peer / mine) : "-" }
         END {for (i = 1; i <= n; i++) {b = o[i]; printf "%12d %22s %22s %22s %22s %22s %9s %9s %9s %9s\n", b,
              cell(1, s[b], sb[b]), cell(b in t, t[b], tb[b]), cell(b in m, m[b], mb[b]), cell(b in c, c[b], cb[b]),
              cell(b in v, v[b], vb[b]), ratio(b in m, m[b], s[b]), ratio(b in c, c[b], s[b]), ratio(b in v, v[b], s[b]),
              ratio(b in t, t[b], s[b])}}' \
        "$TMP/pp.med" "$TMP/pptcp.med" "$TMP/ppshm.med" "$TMP/ppmpich.med" "$TMP/ppompi5.med"
    echo "# ratios are time(peer)/time(spmd): above 1 means spmd is faster"
fi
echo "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
