#!/bin/sh
# Two nodes in two network namespaces joined by a veth pair (10.231.0.1 and
# 10.231.0.2, addresses that exist only inside the namespaces this test
# creates): spmdrun --nnodes 2 --node-rank 0/1 --master-addr 10.231.0.1 on
# each, 2 workers per node forming ONE group of 4 that runs an all_reduce.
# Skips (77) where network namespaces are not permitted.  Everything it
# creates is removed on exit, failures included.
# usage: netns.sh SPMDRUN WORKER ALLREDUCE
SPMDRUN=$1 WORKER=$2 PROG=$3
. "$(dirname "$0")/lib.sh"
# Several nodes share one job secret, as a user exports it before a multi-node job.
SPMD_AUTH_TOKEN=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n'); export SPMD_AUTH_TOKEN

netns_pair t 10.231.0.1 10.231.0.2
ip -n "$NS0" link set "$V0" up && ip -n "$NS1" link set "$V1" up || { fail "namespace setup"; finish; }

# The default --master-port (29500) is safe here: nothing else lives in these namespaces.
ip netns exec "$NS0" "$SPMDRUN" --nnodes 2 --node-rank 0 --nproc-per-node 2 --master-addr 10.231.0.1 \
    --rdzv-id nn "$PROG" >"$TMP/n0.out" 2>"$TMP/n0.err" &
N0=$!
ip netns exec "$NS1" "$SPMDRUN" --nnodes 2 --node-rank 1 --nproc-per-node 2 --master-addr 10.231.0.1 \
    --rdzv-id nn "$PROG" >"$TMP/n1.out" 2>"$TMP/n1.err" || fail "node 1 exited $?"
wait $N0 || fail "node 0 exited $?"
for r in 0 1; do expect_line "$TMP/n0.out" "allreduce ok rank $r of 4 sum 10"; done
for r in 2 3; do expect_line "$TMP/n1.out" "allreduce ok rank $r of 4 sum 10"; done

[ "$FAILED" -eq 0 ] || show "$TMP/n0.out" "$TMP/n0.err" "$TMP/n1.out" "$TMP/n1.err"
finish
