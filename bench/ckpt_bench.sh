#!/bin/sh
# ckpt_bench.sh — spmd's DCP checkpoints against the disk and against torch's
# DCP, same bytes, same run (issue 26): for the seed CNN and ResNet34 (21.3 M
# parameters) with one optimizer moment each, at worlds 1, 2 and 4, every
# tensor split by rows over the ranks:
#   spmd   bench/ckpt_bench.c: spmd_dcp_save / spmd_dcp_load (cold) and
#          the stall of spmd_dcp_save_async and of spmd_dcp_save_async_deferred
#          (copy overlapping the next step) against a forward+backward step
#   disk   dd of the same bytes with conv=fsync (one writer)
#   torch  bench/ckpt_torch.py: torch 2.6's dcp.save / dcp.load / dcp.async_save
#          in the Debian 13 root (scripts/torch2-root.sh); skipped when the
#          root is not there (TORCH=0 skips it too)
#
#   bench/ckpt_bench.sh [BUILD_DIR] [REPS]        (defaults: build, 5)
#
# MODELS / WORLDS change the grid ("cnn resnet34" / "1 2 4"); CKPT_DIR the
# file system measured (default: a temporary folder under /var/tmp, not a
# tmpfs).  Prints each measurement as one key=value line.
set -eu
BUILD=${1:-build}
REPS=${2:-5}
MODELS=${MODELS:-cnn resnet34}
WORLDS=${WORLDS:-1 2 4}
BENCH="$BUILD/bench/ckpt_bench"
SRC=$(cd "$(dirname "$0")/.." && pwd)
[ -x "$BENCH" ] || { echo "ckpt_bench.sh: build first ($BENCH)" >&2; exit 1; }
WORK=$(mktemp -d "${CKPT_DIR:-/var/tmp}/ckpt-bench.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
TORCH=${TORCH:-1}
ROOT=$("$SRC/scripts/torch2-root.sh" path 2>/dev/null || echo /var/cache/spmd/trixie-torch)
[ -f "$ROOT/.spmd-ready" ] || TORCH=0

for model in $MODELS; do
    for world in $WORLDS; do
        "$BENCH" "$model" "$world" "$WORK" "$REPS" "$WORK/shapes-$model.txt"
    done
    bytes=$(awk '{n = 1; for (i = 2; i <= NF; i++) n *= $i; s += 4 * n} END {print s}' "$WORK/shapes-$model.txt")
    # The disk: the same bytes through one writer, synced.
    mib=$(( (bytes + 1048575) / 1048576 ))
    t=$(dd if=/dev/zero of="$WORK/dd.bin" bs=1M count="$mib" conv=fsync 2>&1 | sed -n 's/.*copied, \([0-9.]*\) s.*/\1/p')
    rm -f "$WORK/dd.bin"
    echo "impl=dd model=$model bytes=$((mib * 1048576)) save_s=$t save_MBps=$(awk -v b=$((mib * 1048576)) -v t="$t" 'BEGIN {printf "%.0f", b / t / 1e6}')"
    if [ "$TORCH" = 1 ]; then
        for world in $WORLDS; do
            "$SRC/scripts/torch2-root.sh" run -b "$SRC" -b "$WORK" -- \
                python3 "$SRC/bench/ckpt_torch.py" "$WORK/shapes-$model.txt" "$world" "$WORK" "$REPS" |
                sed "s/^impl=\([^ ]*\) /impl=\1 model=$model /"
        done
    fi
done
