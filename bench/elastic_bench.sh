#!/bin/sh
# elastic_bench.sh — what a lost rank costs (issue 25): spmd-train --elastic
# under spmdrun --on-failure shrink against the torch way, torchrun
# --max-restarts 1 with checkpoints (bench/elastic_torch.py), on the seed CNN
# over Fashion-MNIST at world 4, one thread per rank.
#
#   bench/elastic_bench.sh [BUILD_DIR] [KILL_RANK] [KILL_AT] [EPOCHS]   (build 0 150 1)
#
# spmd: an unfaulted run, then the same seed with rank KILL_RANK SIGKILLing
# itself as step KILL_AT begins (SPMD_TRAIN_KILL); printed: the time from the
# kill to the survivors' first step after it (the kill's wall time against the
# recovery line's), the steps lost (1 when the step in flight was redone, 0
# when a survivor had committed it), the final test accuracy of both runs;
# then the same kill under --on-failure replace (BENCH_REPLACE=0 skips it):
# the time from the kill to the replacement being taken in, after which the
# next step runs at world 4 again.
# torch (when PYTHON has torch and torchrun runs): the same kill under
# torchrun --max-restarts 1 with a checkpoint every CKPT_EVERY (100) steps:
# the time from the kill to the restarted workers' resuming, the steps redone,
# and the accuracy; then that torch program on spmd, spmd_torch.elastic
# recovering in place (elastic_torch.py --elastic), the same figures.  Take
# figures on a quiet machine only (check uptime).
# SPMD_EXTRA adds spmd-train flags (a smoke run: SPMD_EXTRA="--train-samples 2048
# --test-samples 500" with KILL_AT 10).
set -u
BUILD=${1:-build}
VICTIM=${2:-0}
AT=${3:-150}
EPOCHS=${4:-1}
CKPT_EVERY=${CKPT_EVERY:-100}
PY=${PYTHON:-python3}
HERE=$(cd "$(dirname "$0")" && pwd)
TRAIN="$BUILD/tools/spmd-train" RUN="$BUILD/tools/spmdrun"
[ -x "$TRAIN" ] && [ -x "$RUN" ] || { echo "elastic_bench.sh: build first ($TRAIN, $RUN)" >&2; exit 1; }
TMP=$(mktemp -d /tmp/elastic_bench.XXXXXX) || exit 1
trap 'rm -rf "$TMP"' EXIT
echo "# $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg); CNN, world 4, batch 16 per rank, $EPOCHS epoch(s)"

spmd() {  # name [SPMD_TRAIN_KILL [shrink|replace]]
    SPMD_TRAIN_KILL=${2:-} SPMD_HEARTBEAT_TIMEOUT=0 "$RUN" --standalone --nproc-per-node 4 --on-failure "${3:-shrink}" \
        "$TRAIN" --elastic --model cnn --batch-size 16 --epochs "$EPOCHS" --threads 1 --seed 1 \
        --log-every 50 --check-sync ${SPMD_EXTRA:-} > "$TMP/$1.out" 2> "$TMP/$1.err"
    echo $?
}
acc() { sed -n 's/.*test accuracy \([0-9.]*\) (evaluation.*/\1/p' "$1" | tail -1; }

rc=$(spmd clean)
[ "$rc" = 0 ] || { echo "the unfaulted run failed:"; tail -5 "$TMP/clean.err"; exit 1; }
rc=$(spmd killed "$VICTIM:$AT")
[ "$rc" = 0 ] || { echo "the faulted run failed:"; tail -5 "$TMP/killed.err"; exit 1; }
kill_t=$(sed -n 's/.*SIGKILLs itself as step .* at \([0-9.]*\)$/\1/p' "$TMP/killed.err" | head -1)
line=$(grep '^elastic: training step failed' "$TMP/killed.out" | head -1)
back_t=$(echo "$line" | sed -n 's/.* at \([0-9.]*\)$/\1/p')
lost=0
echo "$line" | grep -q "redone" && lost=1
grep -q "check-sync: parameters, optimizer state identical on all 3 rank(s)" "$TMP/killed.out" ||
    echo "WARNING: the survivors' replicas were not shown identical"
echo "spmd  --elastic: rank $VICTIM killed at step $AT; kill to first step after it $(awk "BEGIN {printf \"%.3f\", $back_t - $kill_t}") s;" \
     "steps lost $lost; accuracy $(acc "$TMP/killed.out") (unfaulted $(acc "$TMP/clean.out"))"
echo "      $line"

# With a replacement (--on-failure replace): spmdrun starts a new worker in
# the killed one's place; it loads the data, receives the state from a
# survivor and is taken in at the next step boundary (world 4 again).
if [ "${BENCH_REPLACE:-1}" = 1 ]; then
    rc=$(spmd replaced "$VICTIM:$AT" replace)
    [ "$rc" = 0 ] || { echo "the run with a replacement failed:"; tail -5 "$TMP/replaced.err"; exit 1; }
    kill_t=$(sed -n 's/.*SIGKILLs itself as step .* at \([0-9.]*\)$/\1/p' "$TMP/replaced.err" | head -1)
    join=$(grep 'spmd-train: joined as rank' "$TMP/replaced.err" | head -1)
    join_t=$(echo "$join" | sed -n 's/.* at \([0-9.]*\)$/\1/p')
    grep -q "check-sync: parameters, optimizer state identical on all 4 rank(s)" "$TMP/replaced.out" ||
        echo "WARNING: the replicas were not shown identical after the replacement"
    echo "spmd  --elastic, --on-failure replace: kill to the joiner taken in (its first step next) $(awk "BEGIN {printf \"%.3f\", $join_t - $kill_t}") s;" \
         "accuracy $(acc "$TMP/replaced.out")"
    echo "      $join"
fi

[ "${BENCH_TORCH:-1}" = 0 ] && exit 0
if ! "$PY" -c "import torch" 2>/dev/null; then
    echo "torch: $PY has no torch (set PYTHON): the torchrun comparison is skipped"
    exit 0
fi
# kill_to_resumed OUT: seconds from elastic_torch.py's "kill" line to its "resumed" line
kill_to_resumed() {
    awk '$1 == "kill" {k = $2} $1 == "resumed" {r = $2} END {printf "%.3f", r - k}' "$1"
}
TORCHRUN=${TORCHRUN:-torchrun}
mkdir -p "$TMP/ckpt"
# Underscored flags: torch 1.13's torchrun knows no hyphenated spellings (2.x
# takes both).  --redirects 1 --tee 1: Debian 12's torchrun (1.13 under Python
# 3.11) cannot parse the default "0" (Std.from_str returns None, every start
# fails); stdout then reaches us through tee, each line prefixed [defaultN]:.
"$TORCHRUN" --standalone --nproc_per_node 4 --max_restarts 1 --redirects 1 --tee 1 "$HERE/elastic_torch.py" --epochs "$EPOCHS" \
    --ckpt-dir "$TMP/ckpt" --ckpt-every "$CKPT_EVERY" --kill-rank "$VICTIM" --kill-at "$AT" \
    > "$TMP/torch.tee" 2> "$TMP/torch.err" || { echo "torchrun failed:"; tail -5 "$TMP/torch.err"; exit 1; }
sed 's/^\[default[0-9]*\]://' "$TMP/torch.tee" > "$TMP/torch.out"
from=$(sed -n 's/^resumed [0-9.]* from step \([0-9]*\)/\1/p' "$TMP/torch.out")
echo "torch torchrun --max-restarts 1, checkpoint every $CKPT_EVERY: kill to resumed $(kill_to_resumed "$TMP/torch.out") s" \
     "(workers restarted, data reloaded); steps redone $((AT - 1 - from)); $(grep '^done' "$TMP/torch.out")"

# The same torch program on spmd: spmd_torch.elastic under spmdrun --on-failure
# shrink (needs spmd_torch built in BUILD/python); the default group forms on
# spmdrun's store, so any rank can be the one killed, rank 0 included.
[ -d "$BUILD/python/spmd_torch" ] || { echo "spmd_torch: not built in $BUILD: the spmd_torch.elastic run is skipped"; exit 0; }
EV=$VICTIM
PYTHONPATH="$BUILD/python${PYTHONPATH:+:$PYTHONPATH}" "$RUN" --standalone --nproc-per-node 4 --on-failure shrink \
    "$PY" "$HERE/elastic_torch.py" --elastic --epochs "$EPOCHS" --ckpt-dir "$TMP" --kill-rank "$EV" --kill-at "$AT" \
    > "$TMP/spmdtorch.out" 2> "$TMP/spmdtorch.err" || { echo "spmd_torch.elastic run failed:"; tail -5 "$TMP/spmdtorch.err"; exit 1; }
redone=$(sed -n 's/^resumed .*(steps redone \([0-9]*\))/\1/p' "$TMP/spmdtorch.out")
echo "torch spmd_torch.elastic (rank $EV killed): kill to resumed $(kill_to_resumed "$TMP/spmdtorch.out") s" \
     "(in place); steps redone $redone; $(grep '^done' "$TMP/spmdtorch.out")"
