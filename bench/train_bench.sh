#!/bin/sh
# train_bench.sh — spmd-train against PyTorch (bench/train_torch.py), single
# process, one thread each, the seeds' recipes, in the same run.
#
#   bench/train_bench.sh [BUILD_DIR] [REPEATS]      (defaults: build, 3)
#
# Each configuration runs REPEATS times, spmd and torch alternating so both see
# the same machine load; the medians and their ratio are printed.  When
# OPENBLAS_CORETYPE is set (it forces OpenBLAS's kernel choice for both
# programs), the table is printed twice: as set, then with it unset so
# OpenBLAS picks the kernels for the CPU itself.  Needs
# python3 with torch (Debian: python3-torch) and Fashion-MNIST
# (dataset-fashion-mnist).  Set PYTHON to choose the interpreter.
set -eu
BUILD=${1:-build}
REPS=${2:-3}
HERE=$(cd "$(dirname "$0")" && pwd)
TRAIN="$BUILD/tools/spmd-train"
PY=${PYTHON:-python3}
[ -x "$TRAIN" ] || { echo "train_bench.sh: $TRAIN not found (build first)" >&2; exit 1; }
"$PY" -c "import torch" 2>/dev/null || { echo "train_bench.sh: $PY has no torch (apt-get install python3-torch, or set PYTHON)" >&2; exit 1; }

median() { sort -n | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else printf "%.0f\n", (a[NR/2]+a[NR/2+1])/2}'; }
best() { sort -n | tail -1; }

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
echo "torch $("$PY" -c 'import torch; print(torch.__version__)')"

run_config() {  # name model batch steps(0 = one epoch)
    name=$1; model=$2; batch=$3; steps=$4
    s=""; t=""
    i=0
    while [ $i -lt "$REPS" ]; do
        if [ "$steps" -gt 0 ]; then
            sa="--steps $steps"; ta="--steps $((steps + 10))"
        else
            sa="--epochs 1"; ta="--epochs 1"
        fi
        # shellcheck disable=SC2086
        v=$($ENVCMD "$TRAIN" --model "$model" --batch-size "$batch" $sa --no-eval --quiet --threads 1 |
            sed -n 's/.*: \([0-9]*\) samples\/s.*/\1/p' | head -1)
        s="$s $v"
        # shellcheck disable=SC2086
        v=$($ENVCMD "$PY" "$HERE/train_torch.py" --model "$model" --batch-size "$batch" $ta |
            sed -n 's/.*: \([0-9]*\) samples\/s.*/\1/p')
        t="$t $v"
        i=$((i + 1))
    done
    ms=$(echo $s | tr ' ' '\n' | median)
    mt=$(echo $t | tr ' ' '\n' | median)
    bs=$(echo $s | tr ' ' '\n' | best)
    bt=$(echo $t | tr ' ' '\n' | best)
    printf '%-28s %12s %12s %7s   best %s %s %s\n' "$name" "$ms" "$mt" \
        "$(awk "BEGIN {printf \"%.2f\", $ms / $mt}")" "$bs" "$bt" "$(awk "BEGIN {printf \"%.2f\", $bs / $bt}")"
    echo "  runs: spmd [$s ] torch [$t ]"
}

table() {
    echo "OpenBLAS kernels: $($ENVCMD "$TRAIN" --model mlp --steps 1 --no-eval | sed -n 's/^BLAS: OpenBLAS \([^ ]*\).*/\1/p')" \
         "(OPENBLAS_CORETYPE=$($ENVCMD sh -c 'echo ${OPENBLAS_CORETYPE:-unset}'))," \
         "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
    printf '%-28s %12s %12s %7s   %s\n' "configuration" "spmd /s" "torch /s" "ratio" "(medians; best: spmd torch ratio)"
    run_config "cnn, batch 16, 300 steps" cnn 16 300
    run_config "cnn, batch 32, 200 steps" cnn 32 200
    run_config "mlp, batch 64, 1 epoch" mlp 64 0
    echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
}

ENVCMD=env
table
if [ -n "${OPENBLAS_CORETYPE:-}" ]; then
    echo
    ENVCMD="env -u OPENBLAS_CORETYPE"
    table
fi
