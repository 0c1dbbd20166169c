#!/bin/sh
# All-reduce and ping-pong, spmd against its peers in the same run:
# Open MPI over TCP (--mca btl tcp,self), Open MPI over shared memory, torch gloo.
#   bench/compare.sh [build-dir] [world] [iters]
# Needs bench/install-peers.sh; a missing peer is skipped with a note.
set -u
BUILD=${1:-build}
W=${2:-2}
IT=${3:-20}
MAXB=$((64 * 1024 * 1024))
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(date -u +%Y-%m-%d)"
echo "# all_reduce float sum, world $W, busbw GB/s (time us), slowest rank's mean of $IT iterations"

"$BUILD/tools/spmd-bench" --np "$W" -o all_reduce -b 4 -e $MAXB -f 2 -n "$IT" -w 5 -c 0 --outplace-only \
    | awk '!/^#/ && NF {print $1, $6, $8}' > "$TMP/spmd"
MPIRUN="mpirun --allow-run-as-root --oversubscribe"
if command -v mpicc >/dev/null 2>&1; then
    mpicc -O2 "$(dirname "$0")/mpi_bench.c" -o "$TMP/mpi_bench"
    $MPIRUN -np "$W" --mca btl tcp,self "$TMP/mpi_bench" allreduce 4 $MAXB "$IT" > "$TMP/mpitcp" 2>/dev/null
    $MPIRUN -np "$W" --mca btl vader,self "$TMP/mpi_bench" allreduce 4 $MAXB "$IT" > "$TMP/mpishm" 2>/dev/null
else
    echo "# (Open MPI not installed: skipped)"; : > "$TMP/mpitcp"; : > "$TMP/mpishm"
fi
# Debian's torch lives in the system python (a pyenv python3 may shadow it).
PY=${SPMD_PYTHON:-/usr/bin/python3}
if "$PY" -c "import torch" 2>/dev/null; then
    "$PY" "$(dirname "$0")/gloo_bench.py" "$W" 4 $MAXB "$IT" > "$TMP/gloo" 2>/dev/null
else
    echo "# (python3-torch not installed: gloo skipped)"; : > "$TMP/gloo"
fi
printf "%12s %20s %20s %20s %20s %10s %10s\n" bytes spmd "ompi-tcp" "ompi-shm" gloo "vs tcp" "vs gloo"
awk 'FNR==1{f++} f==1{s[$1]=$3; st[$1]=$2; order[++n]=$1} f==2{t[$1]=$3; tt[$1]=$2} f==3{m[$1]=$3; mt[$1]=$2} f==4{g[$1]=$3; gt[$1]=$2}
     END{for(i=1;i<=n;i++){b=order[i];
        printf "%12d %10.3f(%8.1f) %10s(%8s) %10s(%8s) %10s(%8s) %10s %10s\n", b, s[b], st[b],
          (b in t)?t[b]:"-", (b in tt)?tt[b]:"-", (b in m)?m[b]:"-", (b in mt)?mt[b]:"-", (b in g)?g[b]:"-", (b in gt)?gt[b]:"-",
          (b in tt && st[b]>0)?sprintf("%.2fx", tt[b]/st[b]):"-", (b in gt && st[b]>0)?sprintf("%.2fx", gt[b]/st[b]):"-"}}' \
    "$TMP/spmd" "$TMP/mpitcp" "$TMP/mpishm" "$TMP/gloo"
echo "# ratios are time(peer)/time(spmd): above 1 means spmd is faster"

if [ "$W" = 2 ]; then
    echo
    echo "# ping-pong, half round trip us (bandwidth GB/s)"
    "$BUILD/tools/spmd-bench" --np 2 -o pingpong -b 4 -e $((16 * 1024 * 1024)) -f 4 -n 200 -w 20 \
        | awk '!/^#/ && NF {print $1, $2, $3}' > "$TMP/pp"
    if [ -x "$TMP/mpi_bench" ]; then
        $MPIRUN -np 2 --mca btl tcp,self "$TMP/mpi_bench" pingpong 4 $((16 * 1024 * 1024)) 200 > "$TMP/pptcp" 2>/dev/null
        $MPIRUN -np 2 --mca btl vader,self "$TMP/mpi_bench" pingpong 4 $((16 * 1024 * 1024)) 200 > "$TMP/ppshm" 2>/dev/null
    else : > "$TMP/pptcp"; : > "$TMP/ppshm"; fi
    printf "%12s %22s %22s %22s\n" bytes spmd "ompi-tcp" "ompi-shm"
    awk 'FNR==1{f++} f==1{s[$1]=$2" ("$3")"; o[++n]=$1} f==2{t[$1]=$2" ("$3")"} f==3{m[$1]=$2" ("$3")"}
         END{for(i=1;i<=n;i++){b=o[i]; printf "%12d %22s %22s %22s\n", b, s[b], (b in t)?t[b]:"-", (b in m)?m[b]:"-"}}' \
        "$TMP/pp" "$TMP/pptcp" "$TMP/ppshm"
fi
