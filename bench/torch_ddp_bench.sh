#!/bin/sh
# torch DDP of seed 000's CNN at world 2 over spmd and over gloo, against one
# process without DDP, in the same run, on both torches (issue 24 §4: at
# least 0.9 of perfect scaling, never slower than gloo).
#
#   bench/torch_ddp_bench.sh [BUILD [TORCH2_BUILD [REPEATS [STEPS]]]]
#   (defaults: build, build-torch2, 5, 300)
#
# Each round runs, in turn, bench/train_torch.py as one process, as DDP over
# gloo at world 2, and as DDP over spmd at world 2 (batch 16 per rank, one
# thread per process, the first 10 steps untimed), so all three see the same
# machine, plus two independent single processes at once (what the two
# cores give two trainings that never talk: memory bandwidth and caches are
# shared, so this is the machine's own bound on scaling).  Reported: the
# median samples/s over the rounds (all ranks), the scaling efficiency =
# world-2 samples/s / (2 x one process), spmd / gloo, and spmd against the
# two independent processes.
# Host torch first (Debian 12: 1.13, BUILD's spmd_torch), then torch 2.6 in
# the Debian 13 root (scripts/torch2-root.sh; TORCH2_BUILD).  On 2 cores the
# two ranks take both: perfect scaling leaves nothing for communication, so
# what is lost is what the backend costs.  Take figures on a quiet machine.
set -eu
PY=${PYTHON:-/usr/bin/python3}
cd "$(dirname "$0")/.."
BUILD=${1:-build}
TORCH2_BUILD=${2:-build-torch2}
REPS=${3:-5}
STEPS=${4:-300}

one_torch() {  # one_torch BUILD: every round, then the summary
    out=$(mktemp -d)
    common="--model cnn --batch-size 16 --steps $((STEPS + 10))"
    echo "torch $($PY -c 'import torch; print(torch.__version__)'), $REPS rounds of $STEPS timed steps," \
         "load average $(cut -d' ' -f1-3 /proc/loadavg)"
    r=1
    while [ "$r" -le "$REPS" ]; do
        for cfg in one two gloo spmd; do
            case $cfg in
                one|two) args="" ;;
                gloo) args="--world-size 2 --backend gloo" ;;
                spmd) args="--world-size 2 --backend spmd" ;;
            esac
            if [ $cfg = two ]; then # two independent single processes at once: what two cores give
                # shellcheck disable=SC2086
                PYTHONPATH=$1/python $PY bench/train_torch.py $common > "$out/log2" 2>&1 &
                p2=$!
            fi
            # shellcheck disable=SC2086
            PYTHONPATH=$1/python $PY bench/train_torch.py $common $args > "$out/log" 2>&1 ||
                { echo "torch_ddp_bench.sh: $cfg failed:" >&2; cat "$out/log" >&2; rm -rf "$out"; return 1; }
            sps=$(sed -n 's/.*: \([0-9][0-9]*\) samples\/s.*/\1/p' "$out/log" | tail -1)
            if [ $cfg = two ]; then
                wait $p2 || { echo "torch_ddp_bench.sh: two failed:" >&2; cat "$out/log2" >&2; rm -rf "$out"; return 1; }
                sps=$((sps + $(sed -n 's/.*: \([0-9][0-9]*\) samples\/s.*/\1/p' "$out/log2" | tail -1)))
            fi
            echo "$sps" >> "$out/$cfg"
        done
        r=$((r + 1))
    done
    med() { sort -n "$out/$1" | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
    O=$(med one); T=$(med two); G=$(med gloo); S=$(med spmd)
    printf '  one process %s samples/s, two at once %s; DDP world 2: gloo %s, spmd %s (rounds: gloo %s; spmd %s)\n' \
        "$O" "$T" "$G" "$S" "$(paste -sd' ' "$out/gloo")" "$(paste -sd' ' "$out/spmd")"
    awk -v o="$O" -v t="$T" -v g="$G" -v s="$S" 'BEGIN {
        printf "  scaling efficiency (world 2 / 2 x one process): spmd %.3f, gloo %.3f; spmd / gloo %.2f\n", s / (2 * o), g / (2 * o), s / g
        printf "  two independent processes at once reach %.3f of 2 x one: the machine'"'"'s own bound; spmd is %.3f of it\n", t / (2 * o), s / t }'
    rm -rf "$out"
}

if [ "${SPMD_TORCH_DDP_BENCH_INNER:-}" = 1 ]; then
    one_torch "$BUILD"
    exit 0
fi
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, $(uname -r), $(date -u +%Y-%m-%d)"
echo "== host torch (build dir $BUILD)"
[ -e "$BUILD/python/spmd_torch" ] || { echo "no spmd_torch in $BUILD (make build)" >&2; exit 1; }
one_torch "$BUILD"
echo "== torch 2.6 in the Debian 13 root (build dir $TORCH2_BUILD)"
./scripts/torch2-root.sh run -b . -b /usr/share/datasets/fashion-mnist -- sh -c "cmake -S . -B $TORCH2_BUILD -DSPMD_WITH_TORCH=ON >/dev/null && \
    cmake --build $TORCH2_BUILD -j 2 --target spmd_torch >/dev/null && \
    SPMD_TORCH_DDP_BENCH_INNER=1 bench/torch_ddp_bench.sh $TORCH2_BUILD $TORCH2_BUILD $REPS $STEPS"
