#!/bin/sh
# spmd-train --elastic under spmdrun --on-failure shrink at world 4: the
# ranks named by KILL (SPMD_TRAIN_KILL, "R:S,...": the process that started as
# rank R SIGKILLs itself as global step S begins) die mid-epoch; the others
# shrink, re-deal the rest of the epoch and finish.  Checked: spmdrun exits 0
# and names the loss; every survivor reports the recovery at world AFTER; the
# global steps logged are 1..STEPS, each once, in order (no step skipped, none
# counted twice: the failed step was redone once); --check-sync finds the
# parameters and optimizer state bit-identical on the AFTER survivors.
# With MODE replace (spmdrun --on-failure replace): a new process takes each
# lost one's place, the survivors wait for it right after their recovery
# (SPMD_ON_FAILURE=replace), it joins (SPMD_JOIN=1) and receives the state;
# the run ends at world 4 with the joiners' replicas identical too.
# With DIE_AT (SPMD_TEST_DIE_AT=POINT:R@1, src/common/test_die.h) rank R
# dies inside that recovery too (in the shrink, or sending the state): the
# same recovery ends at world 4 - 2.
#   train_elastic.sh SPMDRUN SPMD_TRAIN KILL AFTER STEPS [shrink|replace] [DIE_AT]
set -u
SPMDRUN=$1 TRAIN=$2 KILL=$3 AFTER=$4 STEPS=$5 MODE=${6:-shrink} DIE_AT=${7:-}
[ -d /usr/share/datasets/fashion-mnist ] || { echo "no Fashion-MNIST: skipped"; exit 77; }
out=$(mktemp /tmp/spmd_train_elastic_XXXXXX) || exit 1
trap 'rm -f "$out" "$out.err"' EXIT
lost=$(echo "$KILL" | tr ',' '\n' | wc -l)
victims=$(echo "$KILL" | tr ',' ' ')
if [ -n "$DIE_AT" ]; then
    lost=$((lost + 1))
    r=${DIE_AT#*:}
    victims="$victims ${r%@*}:"
fi
fail() { echo "FAIL: $*"; exit 1; }
# what --elastic cannot do is refused before anything starts, naming why
"$TRAIN" --elastic --pp 2 > "$out" 2>&1 && fail "--elastic --pp 2 was accepted"
grep -q "elastic does not go with --pp and --tp (their parts of the model are not re-formed)" "$out" ||
    { cat "$out"; fail "--elastic --pp 2: no reason given"; }
env -u RANK -u WORLD_SIZE "$TRAIN" --elastic --model mlp --train-samples 64 --no-eval > "$out" 2>&1 &&
    fail "--elastic without a launcher was accepted"
grep -q "needs a launcher" "$out" || { cat "$out"; fail "--elastic without a launcher: no reason given"; }
# 256 samples, 8 per rank and step: 8 steps per epoch at world 4
SPMD_TIMEOUT=120s SPMD_HEARTBEAT_TIMEOUT=0 SPMD_TRAIN_KILL=$KILL SPMD_TEST_DIE_AT=$DIE_AT \
    "$SPMDRUN" --standalone --nproc-per-node 4 --on-failure "$MODE" \
    "$TRAIN" --elastic --model mlp --train-samples 256 --test-samples 64 --batch-size 8 --epochs 2 \
    --log-every 1 --threads 1 --no-prefetch --check-sync > "$out" 2> "$out.err"
rc=$?
cat "$out" "$out.err"
[ $rc = 0 ] || fail "spmdrun exited $rc"
for k in $victims; do
    grep -q "rank ${k%%:*} (pid [0-9]*) was killed by signal 9" "$out.err" || fail "the loss of rank ${k%%:*} is not reported"
done
got=$(sed -n 's/^epoch [0-9]* step \([0-9]*\): .*/\1/p' "$out" | tr '\n' ' ')
if [ "$MODE" = replace ]; then
    grep -q "$lost worker(s) lost, $lost replaced; 4 finished" "$out.err" || fail "no summary of $lost replaced"
    [ "$(grep -c "spmd-train: joined as rank [0-9] of [0-9] after step" "$out.err")" = "$lost" ] ||
        fail "not $lost joiner(s)"
    grep -q "^elastic: $lost process(es) joined after step [0-9]*: world $((4 - lost)) -> 4 " "$out" ||
        fail "the members did not report the grow"
else
    grep -q "$lost worker(s) lost, the other $AFTER finished" "$out.err" || fail "no summary of $lost lost"
fi
grep -q "^elastic: training step failed at step [0-9]* (rank(s) [0-9, ]* gone): world 4 -> $((4 - lost)) " "$out" ||
    fail "no recovery to world $((4 - lost)) reported"
want=$(seq 1 "$STEPS" | tr '\n' ' ')
[ "$got" = "$want" ] || fail "steps logged: $got; expected $want"
grep -q "check-sync: parameters, optimizer state identical on all $AFTER rank(s)" "$out" ||
    fail "the survivors' replicas are not shown identical"
exit 0
