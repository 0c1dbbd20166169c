#!/bin/sh
# Elastic membership with --nnodes 1:2 and the c10d backend, two agents on this
# host over loopback:
#   round 0: node 0 alone (min 1 node; the last-call window passes), world 2;
#   node 1 arrives late: it ends round 0 ("join") and round 1 runs both, world 4,
#            node 1 numbered by arrival (node rank 1), restart count 1;
#   node 1's agent is SIGKILLed: its workers die with it, node 0 misses its
#            keep-alives, ends round 1 ("lost") and runs round 2 alone, world 2,
#            where the workers finish; the job succeeds.
# usage: elastic.sh SPMDRUN WORKER
SPMDRUN=$1 WORKER=$2
. "$(dirname "$0")/lib.sh"
# No secret set: both nodes (one home directory) prove the per-user secret
# file, created on first use in a home of this test's own (issue 23).
unset SPMD_AUTH_TOKEN SPMD_AUTH_FILE
XDG_CONFIG_HOME=$TMP/home/.config; export XDG_CONFIG_HOME
mkdir -m 700 "$TMP/home"
mkfifo "$TMP/n0.fifo" "$TMP/n1.fifo"
# Hold both fifos open read-write, so the agents can open them before we read
# (start_host waits for node 0's stderr first); closed once the writers are gone.
exec 8<>"$TMP/n0.fifo" 9<>"$TMP/n1.fifo"

SPMD_RDZV_LAST_CALL=200ms SPMD_RDZV_KEEPALIVE_INTERVAL=200ms SPMD_RDZV_KEEPALIVE_TIMEOUT=3s \
    start_host n0 sh -c 'exec "$@" >"$0"' "$TMP/n0.fifo" "$SPMDRUN" --nnodes 1:2 --rdzv-backend c10d \
    --node-rank 0 --nproc-per-node 2 --master-port 0 --max-restarts 2 --rdzv-id el --tee 1 \
    "$WORKER" hang-until 2
open_fifo 6 "$TMP/n0.fifo"
read_until 6 "$TMP/n0.log" 2 "pids"
expect_count "$TMP/n0.log" '^\[rank[01]\]:hold restart=0 world=2 rank=[01] group=0$' 2

# Node 1: a long last call of its own (it leads round 1, which closes when node 0 arrives).
SPMD_RDZV_LAST_CALL=20 SPMD_RDZV_KEEPALIVE_INTERVAL=200ms \
    "$SPMDRUN" --nnodes 1:2 --rdzv-backend c10d --nproc-per-node 2 --master-port "$HOST_PORT" \
    --max-restarts 2 --rdzv-id el --tee 1 "$WORKER" hang-until 2 >"$TMP/n1.fifo" 2>"$TMP/n1.err" &
N1=$!
open_fifo 7 "$TMP/n1.fifo"
read_until 7 "$TMP/n1.log" 2 "pids"
read_until 6 "$TMP/n0.log" 4 "pids"
for r in 0 1; do expect_line "$TMP/n0.log" "[rank$r]:hold restart=1 world=4 rank=$r group=0"; done
for r in 2 3; do expect_line "$TMP/n1.log" "[rank$r]:hold restart=1 world=4 rank=$r group=1"; done
expect_text "$TMP/n1.err" "asking to join"

n1pids=$(pids_of "$TMP/n1.log")
kill -KILL $N1
wait $N1
exec 9<&-
drain 7 "$TMP/n1.log"
"$WORKER" gone 3000 $n1pids || fail "node 1's workers outlived its agent"

wait_host || fail "node 0 exited $?, expected success in round 2"
exec 8<&-
drain 6 "$TMP/n0.log"
wait
for r in 0 1; do expect_line "$TMP/n0.log" "[rank$r]:restart=2 world=2 rank=$r group=0"; done
expect_text "$TMP/n0.err" "sent no keep-alive"
expect_text "$TMP/n0.err" "restarting it (restart 2 of 2)"

[ "$FAILED" -eq 0 ] || show "$TMP/n0.log" "$TMP/n0.err" "$TMP/n1.log" "$TMP/n1.err"
finish
