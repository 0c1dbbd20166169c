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
# MODE=train measures instead what issue 26's goal names: the stall of
# spmd-train's own --async-checkpoint (a deferred save: the step waits for
# the save call and, before its backward, for the staging copy) against its
# step, for the seed CNN and ResNet34 on Fashion-MNIST at WORLDS (default
# "1 2", spmdrun): REPS+1 epochs of STEPS (default 8) steps, batch 32, one
# checkpoint per epoch; the same runs without --async-checkpoint for
# reference.  Prints spmd-train's "checkpoint stall" figures as key=value.
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

if [ "${MODE:-}" = train ]; then
    STEPS=${STEPS:-8}
    for model in $MODELS; do
        for world in ${WORLDS_TRAIN:-1 2}; do
            for how in async sync; do
                flags=""
                [ "$how" = async ] && flags=--async-checkpoint
                rm -rf "$WORK/train"
                # shellcheck disable=SC2086
                out=$("$BUILD/tools/spmdrun" -n "$world" --master-port 0 -- "$BUILD/tools/spmd-train" \
                    --model "$model" --batch-size 32 --train-samples $((32 * world * STEPS)) \
                    --epochs $((REPS + 1)) --no-eval --quiet --threads 1 --checkpoint-dir "$WORK/train" $flags)
                line=$(printf '%s\n' "$out" | grep '^checkpoint stall:') ||
                    { echo "ckpt_bench.sh: no stall line from spmd-train" >&2; exit 1; }
                printf '%s\n' "$line" | sed -n "s/^checkpoint stall: \([0-9]*\) save(s)[^,]*, \([0-9.]*\) ms per save, \([0-9.]*\) % of a step (\([0-9.]*\) ms)$/impl=spmd-train model=$model world=$world save=$how saves=\1 stall_ms=\2 stall_pct_of_step=\3 step_ms=\4/p"
            done
        done
    done
    exit 0
fi
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
