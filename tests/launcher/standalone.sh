#!/bin/sh
# Two --standalone jobs on one host at the same time: each agent hosts its own
# store on a free port and each job's workers find only their own job there.
# Job A's rank 0 keeps A running (store up) until job B has finished.
# usage: standalone.sh SPMDRUN WORKER
SPMDRUN=$1 WORKER=$2
. "$(dirname "$0")/lib.sh"
mkfifo "$TMP/up" "$TMP/release" || exit 1

HOLD_OUT="$TMP/up" HOLD_IN="$TMP/release" "$SPMDRUN" --standalone --nproc-per-node 2 \
    "$WORKER" store-check >"$TMP/a" 2>&1 &
A=$!
# Blocks until A's rank 0 has checked its store (or A died: then the fifo never opens,
# so bound the wait).
timeout 30 head -n 1 "$TMP/up" >/dev/null || fail "job A never came up"
"$SPMDRUN" --standalone --nproc-per-node 2 "$WORKER" store-check >"$TMP/b" 2>&1 || fail "job B exited $?"
echo go >"$TMP/release" &
wait $A || fail "job A exited $?"
for j in a b; do
    expect_line "$TMP/$j" "store ok rank 0 of 2"
    expect_line "$TMP/$j" "store ok rank 1 of 2"
done
[ "$FAILED" -eq 0 ] || show "$TMP/a" "$TMP/b"
finish
