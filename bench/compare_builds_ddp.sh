#!/bin/sh
# compare_builds_ddp.sh — seed-CNN training of two builds of spmd in one run,
# rounds alternating so both see the same load (bench/compare_builds.sh does
# the same for collectives):
#
#   bench/compare_builds_ddp.sh OLD_BUILD NEW_BUILD [ROUNDS] [STEPS]   (defaults 5, 200)
#
# Each round runs spmd-train alone and under spmdrun --nproc-per-node 2
# (DDP) from each build; prints every round's samples/s per build and mode.
set -eu
OLD=$1
NEW=$2
ROUNDS=${3:-5}
STEPS=${4:-200}
COMMON="--model cnn --batch-size 16 --steps $STEPS --no-eval --quiet --threads 1"
echo "# old: $OLD  new: $NEW  $ROUNDS rounds, $STEPS steps; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
sps() { sed -n 's/.*: \([0-9][0-9]*\) samples\/s.*/\1/p' | tail -1; }
r=1
while [ "$r" -le "$ROUNDS" ]; do
    for b in old new; do
        dir=$OLD
        [ "$b" = new ] && dir=$NEW
        # shellcheck disable=SC2086
        echo "$b 1-process $("$dir/tools/spmd-train" $COMMON 2>&1 | sps)"
        # shellcheck disable=SC2086
        echo "$b ddp-world-2 $("$dir/tools/spmdrun" --standalone --nproc-per-node 2 "$dir/tools/spmd-train" $COMMON 2>&1 | sps)"
    done
    r=$((r + 1))
done | sort | awk '{k = $1 " " $2; v[k] = v[k] " " $3} END {for (k in v) print k ":" v[k]}' | sort
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
