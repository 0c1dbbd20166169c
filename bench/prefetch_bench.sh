#!/bin/sh
# prefetch_bench.sh — spmd-train's training samples/s with the batches
# prefetched by a loader thread (--prefetch 2, the default) against filled on
# the training thread (--no-prefetch), in the same run, alternating so both
# see the same machine load: the seed CNN on Fashion-MNIST and ResNet34 on
# CIFAR-10, one process and world 2 under spmdrun.
#
#   bench/prefetch_bench.sh [BUILD_DIR] [ROUNDS]        (defaults: build, 5)
#
# CIFAR-10: CIFAR_DIR=cifar-10-batches-bin (the binary version); without it a
# data set of the real size and format with random pixels is generated in a
# temporary folder (the speed of loading does not depend on the pixels).
# CNN_STEPS / RESNET_STEPS change the run lengths (600 / 40).  Peer: torch's
# DataLoader(num_workers=1, prefetch_factor=2) does the same overlap.
set -eu
BUILD=${1:-build}
ROUNDS=${2:-5}
TRAIN="$BUILD/tools/spmd-train"
SPMDRUN="$BUILD/tools/spmdrun"
CNN_STEPS=${CNN_STEPS:-600}
RESNET_STEPS=${RESNET_STEPS:-40}
[ -x "$TRAIN" ] && [ -x "$SPMDRUN" ] || { echo "prefetch_bench.sh: build first ($TRAIN, $SPMDRUN)" >&2; exit 1; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/prefetch-bench.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
if [ -z "${CIFAR_DIR:-}" ]; then
    CIFAR_DIR="$TMP/cifar"
    python3 - "$CIFAR_DIR" <<'PY'
import os, sys
d = sys.argv[1]
os.makedirs(d)
for name, n in [(f"data_batch_{i}.bin", 10000) for i in range(1, 6)] + [("test_batch.bin", 10000)]:
    b = bytearray(os.urandom(n * 3073))
    b[0::3073] = bytes(x % 10 for x in b[0::3073])
    open(f"{d}/{name}", "wb").write(b)
PY
fi
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
median() { sort -n | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else printf "%.0f\n", (a[NR/2]+a[NR/2+1])/2}'; }
sps() { sed -n 's/.*: \([0-9][0-9]*\) samples\/s (training).*/\1/p' | tail -1; }

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores; load: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-40s %12s %12s %7s\n' "configuration (median of $ROUNDS)" "--prefetch 2" "--no-prefetch" "ratio"
row() {  # LABEL WORLD ARGS...
    label=$1 world=$2
    shift 2
    : >"$TMP/on" && : >"$TMP/off"
    r=0
    while [ $r -lt "$ROUNDS" ]; do
        for mode in on off; do
            flag=--no-prefetch
            [ $mode = on ] && flag="--prefetch 2"
            if [ "$world" -eq 1 ]; then
                # shellcheck disable=SC2086
                "$TRAIN" "$@" $flag --quiet --threads 1 | sps >>"$TMP/$mode"
            else
                # shellcheck disable=SC2086
                "$SPMDRUN" --standalone --nproc-per-node "$world" "$TRAIN" "$@" $flag --quiet --threads 1 | sps >>"$TMP/$mode"
            fi
        done
        r=$((r + 1))
    done
    on=$(median <"$TMP/on") off=$(median <"$TMP/off")
    printf '%-40s %12s %12s %7s\n' "$label" "$on" "$off" "$(awk -v a="$on" -v b="$off" 'BEGIN {printf "%.3f", a / b}')"
}
row "cnn, Fashion-MNIST, 1 process" 1 --model cnn --steps "$CNN_STEPS" --no-eval
row "cnn, Fashion-MNIST, world 2 (DDP)" 2 --model cnn --steps "$CNN_STEPS" --no-eval
row "resnet34, CIFAR-10 (batch 32), 1 process" 1 --model resnet34 --dataset cifar10 --data "$CIFAR_DIR" \
    --batch-size 32 --steps "$RESNET_STEPS" --no-eval
row "resnet34, CIFAR-10 (batch 32), world 2" 2 --model resnet34 --dataset cifar10 --data "$CIFAR_DIR" \
    --batch-size 32 --steps "$RESNET_STEPS" --no-eval
