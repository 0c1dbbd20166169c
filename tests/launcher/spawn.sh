#!/bin/sh
# A program that forks its own ranks (spmd_spawn: examples/allreduce_ones)
# started under a launcher joins the launcher's ranks instead of forking
# again: under spmdrun -n 3 with a spawn of 3 there are 3 ranks, not 9; a
# spawn of another size is refused naming both sizes.
# usage: spawn.sh SPMDRUN WORKER EXAMPLE
SPMDRUN=$1 WORKER=$2 EXAMPLE=$3
. "$(dirname "$0")/lib.sh"

"$SPMDRUN" --standalone --nproc-per-node 3 "$EXAMPLE" 3 >"$TMP/join.out" 2>"$TMP/join.err" ||
    fail "spawn of 3 under spmdrun -n 3 failed: $(cat "$TMP/join.err")"
n=$(grep -c '^.*Rank [0-9]* has data 3$' "$TMP/join.out")
[ "$n" -eq 3 ] || fail "expected 3 ranks each summing 3, got $n: $(cat "$TMP/join.out")"

if "$SPMDRUN" --standalone --nproc-per-node 2 "$EXAMPLE" 3 >"$TMP/size.out" 2>"$TMP/size.err"; then
    fail "spawn of 3 under spmdrun -n 2 succeeded"
fi
expect_text "$TMP/size.err" "spawn of 3 ranks, but this process is rank"
expect_text "$TMP/size.err" "of 2 started by a launcher"

[ "$FAILED" -eq 0 ] || show "$TMP"/*.err "$TMP"/*.out
finish
