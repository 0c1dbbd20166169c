#!/bin/sh
# Signals to spmdrun: SIGTERM and SIGINT are forwarded to the workers' process
# groups, a worker ignoring them is SIGKILLed when the grace period ends, and
# spmdrun dies of the same signal.  SIGKILL to spmdrun itself: the workers die
# of PR_SET_PDEATHSIG and the guard kills their process groups.
# usage: signals.sh SPMDRUN WORKER
SPMDRUN=$1 WORKER=$2
. "$(dirname "$0")/lib.sh"

# start_job NAME GRACE IGNORE: spmdrun with 3 holding workers (IGNORE=1: local
# rank 0 ignores SIGTERM and SIGINT); returns once every worker printed its pids.
start_job() {
    mkfifo "$TMP/$1.fifo"
    # "worker run": background jobs of a script start with SIGINT ignored; undo that.
    SPMD_GRACE_PERIOD=$2 HOLD_IGNORE_TERM=$3 "$WORKER" run "$SPMDRUN" --standalone --nproc-per-node 3 \
        "$WORKER" hold >"$TMP/$1.fifo" 2>"$TMP/$1.err" &
    JOB=$!
    open_fifo 3 "$TMP/$1.fifo"
    read_until 3 "$TMP/$1.out" 3 pids
    drain 3 "$TMP/$1.out"
    DRAIN=$!
}

# stop_job NAME SIGNAL STATUS MIN_MS MAX_MS: send SIGNAL, expect STATUS within the bounds
# and every worker and grandchild gone.
stop_job() {
    pids=$(pids_of "$TMP/$1.out")
    set -- "$@" $pids
    [ $# -eq 11 ] || fail "$1: expected 6 pids, got '$pids'"
    t0=$(now_ms)
    kill -"$2" $JOB
    wait $JOB
    rc=$?
    elapsed=$(( $(now_ms) - t0 ))
    wait $DRAIN
    [ "$rc" -eq "$3" ] || fail "$1: spmdrun exited $rc, expected $3"
    [ "$elapsed" -ge "$4" ] || fail "$1: done after $elapsed ms, expected at least $4"
    [ "$elapsed" -lt "$5" ] || fail "$1: took $elapsed ms, expected less than $5"
    "$WORKER" gone 2000 $pids || fail "$1: processes left behind"
    expect_text "$TMP/$1.err" "stopped by SIG$2"
}

# SIGTERM, workers that honour it: all gone well within the (30 s) grace period.
start_job term 30 0
stop_job term TERM 143 0 15000
# SIGINT (Ctrl-C), local rank 0 ignores it: only the SIGKILL at the end of the
# 1 s grace period ends it.
start_job int 1 1
stop_job int INT 130 900 6000
# SIGTERM with the same stubborn worker.
start_job term2 1 1
stop_job term2 TERM 143 900 6000

# SIGKILL: nothing of spmdrun runs any more, yet nothing survives it.  Its
# flight-record directory (in its TMPDIR) is left, and the next spmdrun of the
# same user removes it.
mkdir "$TMP/tmpdir"
export TMPDIR="$TMP/tmpdir"
start_job kill 30 0
pids=$(pids_of "$TMP/kill.out")
kill -KILL $JOB
wait $JOB
wait $DRAIN
"$WORKER" gone 3000 $pids || fail "KILL: processes left behind"
left=$(ls "$TMPDIR" | grep -c '^spmdrun_flight_')
[ "$left" -eq 1 ] || fail "KILL: expected the killed spmdrun's flight directory, found $left"
"$SPMDRUN" --standalone --nproc-per-node 1 "$WORKER" args >/dev/null 2>"$TMP/next.err" ||
    fail "the next spmdrun failed: $(cat "$TMP/next.err")"
left=$(ls "$TMPDIR" | grep -c '^spmdrun_flight_')
[ "$left" -eq 0 ] || fail "the next spmdrun left $left flight directories: $(ls "$TMPDIR")"
unset TMPDIR

[ "$FAILED" -eq 0 ] || show "$TMP"/*.err
finish
