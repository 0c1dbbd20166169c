#!/bin/sh
# scaling.sh — spmd's data-parallel scaling efficiency at world 2, measured in
# pairs so a noisy machine's drift cancels out.
#
#   bench/scaling.sh [BUILD_DIR] [ROUNDS] [STEPS] [-- extra spmd-train flags]
#                                                 (defaults: build, 11, 600)
#
# Each round runs back to back:
#   one      spmd-train, one process                          (samples/s)
#   ddp      spmdrun --nproc-per-node 2 spmd-train            (samples/s, both ranks)
#   pair     two independent one-process runs at once        (sum of both)
# and prints ddp / (2 x one) — the scaling efficiency — and pair / (2 x one),
# what two processes that never communicate get on this machine: the ceiling
# the shared caches and memory bandwidth leave.  Medians over the rounds.
# Recipe: seed 000's CNN, batch 16 per rank, one BLAS thread, no evaluation.
set -eu
BUILD=${1:-build}
ROUNDS=${2:-11}
STEPS=${3:-600}
shift $(($# < 3 ? $# : 3))
[ "${1:-}" = "--" ] && shift
EXTRA="$*"
TRAIN="$BUILD/tools/spmd-train"
SPMDRUN="$BUILD/tools/spmdrun"
for f in "$TRAIN" "$SPMDRUN"; do
    [ -x "$f" ] || { echo "scaling.sh: $f not found (build first)" >&2; exit 1; }
done
COMMON="--model cnn --batch-size 16 --steps $STEPS --no-eval --quiet --threads 1"
sps() { sed -n 's/.*: \([0-9][0-9]*\) samples\/s.*/\1/p' | head -1; }

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, $(uname -r)"
echo "recipe: cnn, batch 16 per rank, $STEPS steps, $ROUNDS rounds${EXTRA:+, world-2 flags: $EXTRA}"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%5s %8s %8s %8s %10s %10s\n' round one ddp pair "ddp/2one" "pair/2one"
OUT=$(mktemp -d /tmp/scaling.XXXXXX)
trap 'rm -rf "$OUT"' EXIT INT TERM
r=1
while [ "$r" -le "$ROUNDS" ]; do
    # shellcheck disable=SC2086
    one=$("$TRAIN" $COMMON 2>&1 | sps)
    # shellcheck disable=SC2086
    ddp=$("$SPMDRUN" --standalone --nproc-per-node 2 "$TRAIN" $COMMON $EXTRA 2>&1 | grep '^\[rank0\]' | sps)
    # shellcheck disable=SC2086
    "$TRAIN" $COMMON > "$OUT/a" 2>&1 &
    pid=$!
    # shellcheck disable=SC2086
    "$TRAIN" $COMMON > "$OUT/b" 2>&1
    wait $pid
    pair=$(( $(sps < "$OUT/a") + $(sps < "$OUT/b") ))
    e=$(awk "BEGIN {printf \"%.3f\", $ddp / (2 * $one)}")
    p=$(awk "BEGIN {printf \"%.3f\", $pair / (2 * $one)}")
    printf '%5d %8d %8d %8d %10s %10s\n' "$r" "$one" "$ddp" "$pair" "$e" "$p"
    echo "$e $p $one $ddp $pair" >> "$OUT/rows"
    r=$((r + 1))
done
echo "load average after:  $(cut -d' ' -f1-3 /proc/loadavg)"
med() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
echo "median one process:          $(cut -d' ' -f3 "$OUT/rows" | med) samples/s"
echo "median world 2 (DDP):        $(cut -d' ' -f4 "$OUT/rows" | med) samples/s"
echo "scaling efficiency (median): $(cut -d' ' -f1 "$OUT/rows" | med)"
echo "two independent processes:   $(cut -d' ' -f2 "$OUT/rows" | med)   (the machine's ceiling for it)"
