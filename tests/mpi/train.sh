#!/bin/sh
# spmd-train under mpirun with the MPI backend (tests/mpi.cmake):
#   train.sh <spmd-train> <spmdrun> <np> <shm|tcp>
# A few CNN steps on Fashion-MNIST through DDP (gradients by all_reduce over
# MPI, and in shared memory), average sync, and resnet18 with SyncBatchNorm:
# --check-sync passes (every rank holds the same parameters); at world 2 the
# saved models are bit-identical to the same runs under spmdrun on spmd's own
# transport (two ranks sum the same two numbers whatever the algorithm).
# Skips (77) without Fashion-MNIST or mpirun.
set -u
TRAIN=$1 SPMDRUN=$2 NP=$3 BTL=$4
HERE=$(dirname "$0")
DATA=${SPMD_DATA:-/usr/share/datasets/fashion-mnist}
[ -d "$DATA" ] || { echo "SKIP: no Fashion-MNIST in $DATA"; exit 77; }
command -v mpirun >/dev/null 2>&1 || { echo "SKIP: mpirun not installed"; exit 77; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail=0
common="--data $DATA --steps 6 --train-samples 512 --no-eval --check-sync"
i=0
for opts in "--model cnn --no-shared-grads" "--model cnn" "--model cnn --sync average" \
            "--model resnet18 --sync-bn --batch-size 2 --steps 2 --no-shared-grads"; do
    i=$((i + 1))
    # shellcheck disable=SC2086
    if ! sh "$HERE/run.sh" "$NP" "$BTL" "$TRAIN" $common $opts --save-model "$TMP/mpi$i.safetensors" >"$TMP/log" 2>&1; then
        echo "FAIL: mpirun -np $NP spmd-train $opts"; cat "$TMP/log"; fail=1; continue
    fi
    grep -q "backend mpi" "$TMP/log" || { echo "FAIL: not on the MPI backend: $opts"; cat "$TMP/log"; fail=1; }
    [ "$NP" = 2 ] || continue
    # shellcheck disable=SC2086
    if ! SPMD_BACKEND=spmd "$SPMDRUN" --standalone --nproc-per-node 2 "$TRAIN" $common $opts \
            --save-model "$TMP/own$i.safetensors" >"$TMP/log" 2>&1; then
        echo "FAIL: spmdrun spmd-train $opts"; cat "$TMP/log"; fail=1; continue
    fi
    cmp -s "$TMP/mpi$i.safetensors" "$TMP/own$i.safetensors" ||
        { echo "FAIL: $opts: the model trained over MPI differs from spmd's own transport's"; fail=1; }
done
[ $fail = 0 ] && echo "PASS: spmd-train over MPI at $NP ranks ($BTL)"
exit $fail
