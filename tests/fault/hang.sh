#!/bin/sh
# hang.sh SPMDRUN WORKER — a forced hang: rank 2 of 4 skips the all_reduce of
# iteration 3 and waits in a receive nobody sends.
#  1. SIGUSR1 to spmdrun while the job hangs: spmdrun asks the workers for
#     their flight records and prints which rank is missing from which
#     operation; the job goes on (then SIGTERM ends it).
#  2. With SPMD_TIMEOUT=2s the job fails by itself: the same diagnosis above
#     spmdrun's failure report, and the temporary record directory is gone
#     with spmdrun.
set -u
SPMDRUN=$1 WORKER=$2
. "$(dirname "$0")/../launcher/lib.sh"
export FAULT_MODE=skip FAULT_VICTIM=2 FAULT_AT=3 FAULT_ITERS=6
MISSING="rank 2 never entered all_reduce #4 (its last op: all_reduce #3, completed"
WAITING="ranks 0-1, 3 waiting in all_reduce #4"

# 1. SIGUSR1 while it hangs (a generous SPMD_TIMEOUT: the test ends it).
mkfifo "$TMP/out.fifo" "$TMP/err.fifo"
SPMD_TIMEOUT=120 "$SPMDRUN" --standalone --nproc-per-node 4 "$WORKER" >"$TMP/out.fifo" 2>"$TMP/err.fifo" &
JOB=$!
open_fifo 3 "$TMP/out.fifo"
open_fifo 4 "$TMP/err.fifo"
read_until 3 "$TMP/usr1.out" 1 "skipping all_reduce 3"
drain 3 "$TMP/usr1.out"
D3=$!
# The others enter all_reduce #4 right after rank 2 printed: ask until the
# records show them inside (spmdrun answers each SIGUSR1 with one report).
k=0
while [ $k -lt 20 ]; do
    k=$((k + 1))
    kill -USR1 $JOB
    read_until 4 "$TMP/usr1.err" $k "on SIGUSR1 (the job goes on)"
    grep -Fq "$WAITING" "$TMP/usr1.err" && break
done
expect_text "$TMP/usr1.err" "$MISSING"
expect_text "$TMP/usr1.err" "in recv from rank 3 (tag 99)"
expect_text "$TMP/usr1.err" "$WAITING"
expect_text "$TMP/usr1.err" "on SIGUSR1 (the job goes on)"
kill -0 $JOB 2>/dev/null || fail "spmdrun ended after SIGUSR1"
kill -TERM $JOB
wait $JOB
rc=$?
drain 4 "$TMP/usr1.err"
wait
[ "$rc" -eq 143 ] || fail "spmdrun exited $rc after SIGTERM, expected 143"
[ "$FAILED" -eq 0 ] || show "$TMP/usr1.out" "$TMP/usr1.err"

# 2. The job times out by itself.
t0=$(now_ms)
SPMD_TIMEOUT=2s "$SPMDRUN" --standalone --nproc-per-node 4 "$WORKER" >"$TMP/fail.out" 2>"$TMP/fail.err"
rc=$?
[ "$rc" -eq 1 ] || fail "the hung job exited $rc, expected 1"
[ $(( $(now_ms) - t0 )) -lt 30000 ] || fail "the hung job took $(( $(now_ms) - t0 )) ms"
expect_text "$TMP/fail.err" "the worker group failed; the flight records"
expect_text "$TMP/fail.err" "$MISSING"
expect_text "$TMP/fail.err" "$WAITING"
expect_text "$TMP/fail.err" "group default failed: rank"
dir=$(sed -n 's/.*the flight records (\(.*\)) say:.*/\1/p' "$TMP/fail.err" | head -1)
[ -n "$dir" ] && [ ! -e "$dir" ] || fail "the temporary record directory '$dir' is still there"
[ "$FAILED" -eq 0 ] || show "$TMP/fail.err"
finish
