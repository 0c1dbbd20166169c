#!/bin/sh
# A failing worker ends the job: spmdrun exits non-zero within seconds, names
# the rank and the exit code (or signal) in its report, and leaves no process
# behind, grandchildren included.
# usage: fail.sh SPMDRUN WORKER exit|kill9
SPMDRUN=$1 WORKER=$2 KIND=$3
. "$(dirname "$0")/lib.sh"

t0=$(now_ms)
if [ "$KIND" = exit ]; then
    SPMD_GRACE_PERIOD=30 "$SPMDRUN" --standalone --nproc-per-node 3 "$WORKER" exit 3 2 >"$TMP/o" 2>"$TMP/e"
else
    SPMD_GRACE_PERIOD=30 "$SPMDRUN" --standalone --nproc-per-node 3 "$WORKER" kill9 1 >"$TMP/o" 2>"$TMP/e"
fi
rc=$?
elapsed=$(( $(now_ms) - t0 ))
[ "$rc" -eq 1 ] || fail "spmdrun exited $rc, expected 1"
# The others die of SIGTERM at once; the grace period (30 s) must not be needed.
[ "$elapsed" -lt 15000 ] || fail "spmdrun took $elapsed ms"

expect_text "$TMP/e" "Root Cause (first observed failure):"
expect_text "$TMP/e" "<NO_OTHER_FAILURES>"
if [ "$KIND" = exit ]; then
    expect_text "$TMP/e" "rank      : 2 (local_rank: 2)"
    expect_text "$TMP/e" "exitcode  : 3 (pid: "
    expect_text "$TMP/e" "error     : exited with code 3"
    expect_text "$TMP/e" "    rank 2 fails on purpose"   # last stderr lines
    expect_text "$TMP/e" "[rank2]:rank 2 fails on purpose"
else
    expect_text "$TMP/e" "rank      : 1 (local_rank: 1)"
    expect_text "$TMP/e" "exitcode  : -9 (pid: "
    expect_text "$TMP/e" "Signal 9 (SIGKILL) received by PID"
fi
expect_text "$TMP/e" "host      : $(hostname)"

# Every worker and grandchild is gone (each worker printed both pids).
pids=$(pids_of "$TMP/o")
set -- $pids
[ $# -eq 6 ] || fail "expected 6 pids, got '$pids'"
"$WORKER" gone 3000 $pids || fail "processes left behind"

[ "$FAILED" -eq 0 ] || show "$TMP/o" "$TMP/e"
finish
