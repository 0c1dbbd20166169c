#!/bin/sh
# Runs the point-to-point seed examples and checks what they print.
#   check_p2p_examples.sh <examples dir> <name>
set -eu
DIR=$1
out=$(mktemp)
trap 'rm -f "$out"' EXIT
fail() { echo "FAIL: $*"; cat "$out"; exit 1; }
case $2 in
barrier_order)
    "$DIR/barrier_order" 4 > "$out" || fail "exit status"
    [ "$(head -n1 "$out")" = "Started 0" ] || fail "rank 0 must print first"
    [ "$(grep -c '^Started' "$out")" = 4 ] || fail "every rank prints once"
    ;;
pingpong)
    "$DIR/pingpong" 10 > "$out" || fail "exit status"
    expected=$(for i in 1 2 3 4 5 6 7 8 9 10; do printf 'ping\npong\n'; done)
    [ "$(cat "$out")" = "$expected" ] || fail "ping and pong must strictly alternate, 10 rounds"
    ;;
sendrecv)
    "$DIR/sendrecv" > "$out" || fail "exit status"
    grep -q "Rank 1 has data 0" "$out" || fail "rank 1 starts with 0"
    [ "$(grep -c 'Rank 1 has data 1' "$out")" = 1 ] || fail "rank 1 ends with 1"
    ;;
isend_irecv)
    "$DIR/isend_irecv" 300 > "$out" || fail "exit status"
    # irecv returns at once although the sender waits 300 ms, and the data
    # is still 0 before wait(): the call is asynchronous.
    grep -q "Rank 1 has data 0$" "$out" || fail "rank 1's data before wait must be 0"
    ms=$(sed -n 's/.*irecv returned after \([0-9.]*\) ms.*/\1/p' "$out")
    awk -v m="$ms" 'BEGIN{exit !(m < 250)}' || fail "irecv took $ms ms: not asynchronous"
    grep -q "Rank 1 has data 1 (after wait" "$out" || fail "rank 1 holds 1 after wait"
    ;;
*) echo "unknown example $2"; exit 2 ;;
esac
echo "PASS: $2"
