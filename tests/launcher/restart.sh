#!/bin/sh
# --max-restarts: a worker that fails on the first attempt only is restarted
# with TORCHELASTIC_RESTART_COUNT=1 and the job succeeds; a worker that always
# fails exhausts the budget.  Each attempt has its own log directory.
# usage: restart.sh SPMDRUN WORKER
SPMDRUN=$1 WORKER=$2
. "$(dirname "$0")/lib.sh"

"$SPMDRUN" --nproc-per-node 3 --master-port 0 --max-restarts 2 --rdzv-id rs --log-dir "$TMP/logs" \
    "$WORKER" fail-first 1 >"$TMP/o" 2>"$TMP/e" || fail "spmdrun exited $?, expected success"
expect_text "$TMP/e" "worker group failed (rank 1 on $(hostname): exit code 1); restarting it (restart 1 of 2)"
for r in 0 1 2; do expect_line "$TMP/o" "[rank$r]:rank $r ok at restart 1"; done
grep -q "restart 2 of 2" "$TMP/e" && fail "a second restart happened"
expect_text "$TMP/logs/rs/attempt_0/1/stderr.log" "rank 1 fails on the first attempt"
expect_line "$TMP/logs/rs/attempt_1/1/stdout.log" "rank 1 ok at restart 1"
[ -e "$TMP/logs/rs/attempt_2" ] && fail "attempt_2 exists"

# Always failing: two attempts with --max-restarts 1, then the report.
"$SPMDRUN" --nproc-per-node 2 --master-port 0 --max-restarts 1 "$WORKER" exit 4 0 \
    >"$TMP/o2" 2>"$TMP/e2"
rc=$?
[ "$rc" -eq 1 ] || fail "always-failing job exited $rc, expected 1"
expect_count "$TMP/e2" "restarting it" 1
expect_text "$TMP/e2" "exitcode  : 4 (pid: "
set -- $(pids_of "$TMP/o2")
[ $# -eq 8 ] || fail "expected 8 pids over two attempts, got $#"
"$WORKER" gone 3000 "$@" || fail "processes left behind"

[ "$FAILED" -eq 0 ] || show "$TMP/o" "$TMP/e" "$TMP/o2" "$TMP/e2"
finish
