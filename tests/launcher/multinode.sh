#!/bin/sh
# Two agents on this host act as two nodes (--nnodes 2 --node-rank 0/1) over
# loopback: node 0 hosts the store on a free port, node 1 joins it; one group
# of 4 with the right ranks everywhere, logs of both in one directory.  Then a
# worker on node 1 fails on the first attempt: both nodes restart (restart
# count 1) and the job succeeds.  Without restarts left, both nodes report the
# same root cause.  Last, the store's host dies and node 1 notices.
# usage: multinode.sh SPMDRUN WORKER
SPMDRUN=$1 WORKER=$2
. "$(dirname "$0")/lib.sh"
# Several nodes share one job secret, as a user exports it before a multi-node job.
SPMD_AUTH_TOKEN=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n'); export SPMD_AUTH_TOKEN

run_pair() { # TAG WORKER-ARGS...   (both nodes share one --log-dir, like a shared file system)
    _tag=$1
    shift
    start_host "$_tag.n0" "$SPMDRUN" --nnodes 2 --node-rank 0 --nproc-per-node 2 --master-port 0 \
        --rdzv-id "$_tag" --max-restarts 1 --log-dir "$TMP/logs" "$WORKER" "$@"
    [ -n "$HOST_PORT" ] || { fail "$_tag: node 0 did not host the store"; return; }
    "$SPMDRUN" --nnodes 2 --node_rank 1 --nproc_per_node 2 --master_port "$HOST_PORT" \
        --rdzv-id "$_tag" --max-restarts 1 --log-dir "$TMP/logs" "$WORKER" "$@" \
        >"$TMP/$_tag.n1.out" 2>"$TMP/$_tag.n1.err" ||
        fail "$_tag: node 1 exited $?"
    wait_host || fail "$_tag: node 0 exited $?"
}

run_pair env env
for n in 0 1; do
    for l in 0 1; do
        r=$((2 * n + l))
        f="$TMP/env.n$n.out"
        for kv in RANK=$r LOCAL_RANK=$l GROUP_RANK=$n ROLE_RANK=$r LOCAL_WORLD_SIZE=2 WORLD_SIZE=4 \
            GROUP_WORLD_SIZE=2 ROLE_WORLD_SIZE=4 MASTER_ADDR=127.0.0.1 MASTER_PORT=$HOST_PORT \
            TORCHELASTIC_RESTART_COUNT=0 TORCHELASTIC_RUN_ID=env TORCHELASTIC_USE_AGENT_STORE=True; do
            expect_line "$f" "[rank$r]:$kv"
        done
        expect_line "$TMP/logs/env/attempt_0/$r/stdout.log" "RANK=$r"
    done
done

# Rank 3 (node 1) fails in round 0; node 0's workers had already succeeded.
run_pair ff fail-first 3
for r in 0 1; do expect_line "$TMP/ff.n0.out" "[rank$r]:rank $r ok at restart 1"; done
for r in 2 3; do expect_line "$TMP/ff.n1.out" "[rank$r]:rank $r ok at restart 1"; done
expect_text "$TMP/ff.n0.err" "restarting it (restart 1 of 1)"
expect_text "$TMP/ff.n1.err" "restarting it (restart 1 of 1)"
expect_text "$TMP/logs/ff/attempt_0/3/stderr.log" "rank 3 fails on the first attempt"
expect_line "$TMP/logs/ff/attempt_1/3/stdout.log" "rank 3 ok at restart 1"

# Out of restarts: rank 2 always fails; both nodes report the same root cause.
run_pair() { :; }
start_host bad.n0 "$SPMDRUN" --nnodes 2 --node-rank 0 --nproc-per-node 2 --master-port 0 \
    --rdzv-id bad "$WORKER" exit 9 2
"$SPMDRUN" --nnodes 2 --node-rank 1 --nproc-per-node 2 --master-port "$HOST_PORT" --rdzv-id bad \
    "$WORKER" exit 9 2 >"$TMP/bad.n1.out" 2>"$TMP/bad.n1.err"
rc1=$?
wait_host
rc0=$?
[ $rc0 -eq 1 ] && [ $rc1 -eq 1 ] || fail "failing job: nodes exited $rc0 and $rc1, expected 1 and 1"
for n in 0 1; do
    expect_text "$TMP/bad.n$n.err" "rank      : 2 (local_rank: 0)"
    expect_text "$TMP/bad.n$n.err" "exitcode  : 9 (pid: "
done
set -- $(pids_of "$TMP/bad.n0.out") $(pids_of "$TMP/bad.n1.out")
[ $# -eq 8 ] || fail "expected 8 pids, got $#"
"$WORKER" gone 3000 "$@" || fail "processes left behind"

# The node hosting the store dies (SIGKILL): node 1 loses the store, says so,
# tears its workers down and fails; nothing of either node survives.
mkfifo "$TMP/hl0.fifo" "$TMP/hl1.fifo"
exec 8<>"$TMP/hl0.fifo" 9<>"$TMP/hl1.fifo" # let the writers open before we read
start_host hl.n0 sh -c 'exec "$@" >"$0"' "$TMP/hl0.fifo" "$SPMDRUN" --nnodes 2 --node-rank 0 \
    --master-port 0 --rdzv-id hl "$WORKER" hold
"$SPMDRUN" --nnodes 2 --node-rank 1 --master-port "$HOST_PORT" --rdzv-id hl "$WORKER" hold \
    >"$TMP/hl1.fifo" 2>"$TMP/hl.n1.err" &
N1=$!
open_fifo 6 "$TMP/hl0.fifo"
open_fifo 7 "$TMP/hl1.fifo"
read_until 6 "$TMP/hl0.log" 1 pids
read_until 7 "$TMP/hl1.log" 1 pids
kill -KILL $HOST_PID
wait_host
t0=$(now_ms)
wait $N1
rc=$?
elapsed=$(( $(now_ms) - t0 ))
exec 8<&- 9<&-
drain 6 "$TMP/hl0.log"
drain 7 "$TMP/hl1.log"
wait
[ $rc -eq 1 ] || fail "node 1 exited $rc after losing the store, expected 1"
[ $elapsed -lt 10000 ] || fail "node 1 took $elapsed ms to notice"
expect_text "$TMP/hl.n1.err" "rendezvous store at 127.0.0.1:$HOST_PORT"
"$WORKER" gone 3000 $(pids_of "$TMP/hl0.log") $(pids_of "$TMP/hl1.log") || fail "processes left behind"

[ "$FAILED" -eq 0 ] || show "$TMP"/*.err "$TMP"/*.out
finish
