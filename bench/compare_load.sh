#!/bin/sh
# The whole comparison of issue 28 in one command: bench/compare.sh (spmd
# against Open MPI 4.1 vader and TCP, MPICH 4, Open MPI 5, gloo) at worlds 2,
# 4 and 8, each idle and loaded with one and two CPU-bound processes per core
# (BENCH_LOAD = 0, cores, 2 x cores; bench/hogs.sh, started alike for every
# peer).
#   bench/compare_load.sh [build-dir] [iters] [rounds] [outdir]
# Defaults: build, 20 iterations, 3 rounds, bench-load-<date>/.  Each
# configuration's tables go to OUTDIR/w<world>-load<N>.txt and to stdout,
# then the one-page summary of them (bench/load_summary.sh).
# BENCH_WORLDS="2 4 8" and BENCH_LOADS="0 C 2C" (C: the core count) narrow
# it; the other BENCH_* settings of compare.sh pass through (e.g.
# BENCH_MAX_BYTES=65536 for a smoke run; BENCH_MIN_MS=200 times each size for
# at least 200 ms, which beside busy processes measures the sustained rate).  Take figures on a machine with
# nothing else running: the load is what this script adds.
set -u
BUILD=${1:-build}
IT=${2:-20}
ROUNDS=${3:-3}
OUT=${4:-bench-load-$(date -u +%Y%m%dT%H%M)}
HERE=$(dirname "$0")
C=$(nproc)
WORLDS=${BENCH_WORLDS:-2 4 8}
LOADS=$(echo "${BENCH_LOADS:-0 C 2C}" | sed "s/\b2C\b/$((2 * C))/g; s/\bC\b/$C/g")
mkdir -p "$OUT" || exit 1
echo "# compare_load: worlds $WORLDS, background loads $LOADS on $C cores, $IT iterations, $ROUNDS rounds -> $OUT/"
rc=0
for w in $WORLDS; do
    for n in $LOADS; do
        echo "## world $w, $n CPU-bound process(es) beside the ranks"
        BENCH_LOAD=$n "$HERE/compare.sh" "$BUILD" "$w" "$IT" "$ROUNDS" > "$OUT/w$w-load$n.txt" 2>&1 || rc=1
        cat "$OUT/w$w-load$n.txt"
    done
done
echo "## summary (bench/load_summary.sh $OUT)"
"$HERE/load_summary.sh" "$OUT"
exit $rc
