#!/bin/sh
# spmd against gloo as torch backends, on both torches (issue 24 §4):
# all_reduce, all_gather (into tensor) and reduce_scatter (tensor) at world
# 2 and 4 from 4 B to 64 MiB (bench/torch_backend_bench.py), and the FSDP
# step time of a 10.6 M-parameter model at world 2 and 4
# (bench/torch2_fsdp_bench.py) — on this machine's torch (Debian 12: 1.13,
# build dir BUILD) and on torch 2.6 in the Debian 13 root
# (scripts/torch2-root.sh, build dir TORCH2_BUILD; made when missing).
#
#   bench/torch2_bench.sh [--quick] [BUILD [TORCH2_BUILD]]
#
# --quick: a smoke run (4 B to 64 KiB, one round, FSDP 2 steps) that checks
# the scripts run, not a measurement.  Take figures on a quiet machine only.
# PYTHON: the interpreter with torch (default: Debian's /usr/bin/python3).
set -eu
PY=${PYTHON:-/usr/bin/python3}
cd "$(dirname "$0")/.."
quick=0
if [ "${1:-}" = --quick ]; then quick=1; shift; fi
BUILD=${1:-build}
TORCH2_BUILD=${2:-build-torch2}

if [ "$quick" = 1 ]; then
    COLL="--max-bytes 64K --reps 1"
    FSDP="--steps 2 --reps 1"
else
    COLL="--max-bytes 64M --reps 3"
    FSDP="--steps 10 --reps 2"
fi

suite() {  # suite BUILD: every benchmark against the python3 in this root
    for op in all_reduce all_gather reduce_scatter; do
        PYTHONPATH=$1/python $PY bench/torch_backend_bench.py --worlds 2,4 --op $op $COLL
    done
    PYTHONPATH=$1/python $PY bench/torch2_fsdp_bench.py --worlds 2,4 $FSDP || true
}

if [ "${SPMD_TORCH2_BENCH_INNER:-}" = 1 ]; then
    suite "$BUILD"
    exit 0
fi

echo "== host torch (build dir $BUILD)"
[ -e "$BUILD/python/spmd_torch" ] || { echo "no spmd_torch in $BUILD (make build)" >&2; exit 1; }
suite "$BUILD"

echo "== torch 2.6 in the Debian 13 root (build dir $TORCH2_BUILD)"
./scripts/torch2-root.sh run -- sh -c "cmake -S . -B $TORCH2_BUILD -DSPMD_WITH_TORCH=ON >/dev/null && \
    cmake --build $TORCH2_BUILD -j 2 --target spmd_torch >/dev/null && \
    SPMD_TORCH2_BENCH_INNER=1 bench/torch2_bench.sh $([ $quick = 1 ] && echo --quick) $TORCH2_BUILD"
