#!/bin/sh
# spmd-train --elastic --zero (ZeRO-1 under recovery, elastic_zero.c) against
# plain --elastic: the same run (Adam, so two state arrays and the step
# count matter) with the same ranks killed (SPMD_TRAIN_KILL) under spmdrun
# --on-failure MODE must end with the same --check-sync hash of the
# parameters and the whole optimizer state (the shards put together): the
# ZeRO update is the plain one's, bit for bit, so a shard lost, mixed or one
# step off would show.  With LOST given, the kill takes a shard's owner and
# its buddy (ranks r and r+1): the --zero run must fail with every survivor
# naming the lost shard, the plain run goes on.  A kill R:S:gather lands in
# the --zero run's step S after the gradients' all_reduce and the shards'
# update, before the parameters' all_gather: nobody commits, so every
# survivor must put its shards back (the plain run's victim dies as step S
# begins: the same step redone).
#   train_elastic_zero.sh SPMDRUN SPMD_TRAIN KILL MODE [LOST]
set -u
SPMDRUN=$1 TRAIN=$2 KILL=$3 MODE=$4 LOST=${5:-}
[ -d /usr/share/datasets/fashion-mnist ] || { echo "no Fashion-MNIST: skipped"; exit 77; }
dir=$(mktemp -d /tmp/spmd_train_elastic_zero_XXXXXX) || exit 1
trap 'rm -rf "$dir"' EXIT
fail() { for f in "$dir"/*; do echo "----- $f"; cat "$f"; done; echo "FAIL: $*"; exit 1; }
run() { # NAME [--zero]
    kill=$KILL
    [ -n "${2:-}" ] || kill=$(echo "$KILL" | sed 's/:gather//g')
    SPMD_TIMEOUT=120s SPMD_HEARTBEAT_TIMEOUT=0 SPMD_TRAIN_KILL=$kill \
        "$SPMDRUN" --standalone --nproc-per-node 4 --on-failure "$MODE" \
        "$TRAIN" --elastic ${2:-} --optimizer adam --model mlp --train-samples 256 --test-samples 64 \
        --batch-size 8 --epochs 2 --log-every 1 --threads 1 --no-prefetch --check-sync > "$dir/$1.out" 2> "$dir/$1.err"
}
run plain || fail "the plain --elastic run exited $?"
hash=$(sed -n 's/^check-sync: .* (hash \([0-9a-f]*\))$/\1/p' "$dir/plain.out")
[ -n "$hash" ] || fail "no check-sync hash from the plain run"
if [ -n "$LOST" ]; then
    run zero --zero && fail "the --zero run went on without shard $LOST"
    n=$(grep -c "^\[rank[0-9]\]:spmd-train: rank [0-9]: elastic recovery: .*ZeRO-1: the optimizer state of shard $LOST of 4 was on ranks $LOST and $((LOST + 1)) of the old group, both lost" "$dir/zero.err")
    [ "$n" = 2 ] || fail "$n survivor(s) of 2 name the lost shard"
    exit 0
fi
run zero --zero || fail "the --zero run exited $?"
grep -q "check-sync: parameters, optimizer state identical on all [0-9] rank(s) (hash $hash)" "$dir/zero.out" ||
    fail "the --zero run does not end where the plain one does (hash $hash)"
want=$(sed -n 's/^epoch [0-9]* step \([0-9]*\): .*/\1/p' "$dir/plain.out" | tr '\n' ' ')
got=$(sed -n 's/^epoch [0-9]* step \([0-9]*\): .*/\1/p' "$dir/zero.out" | tr '\n' ' ')
[ "$got" = "$want" ] || fail "steps logged: $got; the plain run's: $want"
cat "$dir/zero.out"
exit 0
