#!/bin/sh
# Signals to spmdrun: SIGTERM and SIGINT are forwarded to the workers' process
# groups, a worker ignoring them is SIGKILLed when the grace period ends, and
# spmdrun dies of the same signal.  SIGKILL to spmdrun itself: the workers die
# of PR_SET_PDEATHSIG and the guard kills their process groups.
# usage: signals.sh SPMDRUN WORKER
SPMDRUN=$1 WORKER=$2
. "$(dirname "$0")/lib.sh"

# start_job NAME: spmdrun with 3 holding workers (local rank 0 ignores SIGTERM),
# returns once every worker has printed its pids.
start_job() {
    mkfifo "$TMP/$1.fifo"
    # "worker run": background jobs of a script start with SIGINT ignored; undo that.
    SPMD_GRACE_PERIOD=1 HOLD_IGNORE_TERM=1 "$WORKER" run "$SPMDRUN" --standalone --nproc-per-node 3 \
        "$WORKER" hold >"$TMP/$1.fifo" 2>"$TMP/$1.err" &
    JOB=$!
    open_fifo 3 "$TMP/$1.fifo"
    read_until 3 "$TMP/$1.out" 3 pids
    drain 3 "$TMP/$1.out"
    DRAIN=$!
}

for sig in TERM INT; do
    start_job $sig
    pids=$(pids_of "$TMP/$sig.out")
    set -- $pids
    [ $# -eq 6 ] || fail "$sig: expected 6 pids, got '$pids'"
    t0=$(now_ms)
    kill -$sig $JOB
    wait $JOB
    rc=$?
    elapsed=$(( $(now_ms) - t0 ))
    wait $DRAIN
    want=143
    [ "$sig" = INT ] && want=130
    [ "$rc" -eq "$want" ] || fail "$sig: spmdrun exited $rc, expected $want"
    # Rank 0 ignores the forwarded signal: only the SIGKILL after the 1 s grace ends it.
    [ "$elapsed" -ge 900 ] || fail "$sig: done after $elapsed ms, before the grace period ended"
    [ "$elapsed" -lt 3000 ] || fail "$sig: took $elapsed ms, grace period is 1 s"
    "$WORKER" gone 2000 $pids || fail "$sig: processes left behind"
    expect_text "$TMP/$sig.err" "stopped by SIG$sig"
done

# SIGKILL: nothing of spmdrun runs any more, yet nothing survives it.
start_job KILL
pids=$(pids_of "$TMP/KILL.out")
kill -KILL $JOB
wait $JOB
wait $DRAIN
"$WORKER" gone 3000 $pids || fail "KILL: processes left behind"

[ "$FAILED" -eq 0 ] || show "$TMP/TERM.err" "$TMP/INT.err" "$TMP/KILL.err"
finish
