#!/bin/sh
# spmd-train --elastic across two network namespaces (two "nodes" joined by
# a veth pair, shared memory inside each, TCP between them): spmdrun
# --nnodes 2 --on-failure shrink on each, 2 workers per node forming one
# group of 4; the ranks named by KILL (SPMD_TRAIN_KILL) SIGKILL themselves as
# global step 3 begins, the others shrink across the link and finish.
# Checked: both spmdruns exit 0 and the one whose workers died names the
# loss; the recovery to world AFTER is reported; the global steps logged are
# 1..STEPS, each once; --check-sync finds the survivors' parameters and
# optimizer state bit-identical.  Skips (77) without namespaces or the data.
#   train_elastic_netns.sh SPMDRUN SPMD_TRAIN KILL AFTER STEPS
SPMDRUN=$1 TRAIN=$2 KILL=$3 AFTER=$4 STEPS=$5
[ -d /usr/share/datasets/fashion-mnist ] || { echo "no Fashion-MNIST: skipped"; exit 77; }
. "$(dirname "$0")/../launcher/lib.sh"
SPMD_AUTH_TOKEN=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n'); export SPMD_AUTH_TOKEN
netns_pair e 10.231.0.1 10.231.0.2
ip -n "$NS0" link set "$V0" up && ip -n "$NS1" link set "$V1" up || { fail "namespace setup"; finish; }
export SPMD_TIMEOUT=120s SPMD_HEARTBEAT_TIMEOUT=0 SPMD_TRAIN_KILL=$KILL
run_node() { # NODE: spmdrun of node NODE in its namespace (the fixed port is private to them)
    _ns=$NS0; [ "$1" = 1 ] && _ns=$NS1
    ip netns exec "$_ns" "$SPMDRUN" --nnodes 2 --node-rank "$1" --nproc-per-node 2 --master-addr 10.231.0.1 \
        --rdzv-id el --on-failure shrink \
        "$TRAIN" --elastic --model mlp --train-samples 256 --test-samples 64 --batch-size 8 --epochs 2 \
        --log-every 1 --threads 1 --no-prefetch --check-sync >"$TMP/n$1.out" 2>"$TMP/n$1.err"
}
run_node 0 &
N0=$!
run_node 1 || fail "node 1's spmdrun exited $?"
wait $N0 || fail "node 0's spmdrun exited $?"
lost=$(echo "$KILL" | tr ',' '\n' | wc -l)
for k in $(echo "$KILL" | tr ',' ' '); do
    r=${k%%:*}
    grep -q "rank $r (pid [0-9]*) was killed by signal 9" "$TMP/n$((r / 2)).err" ||
        fail "node $((r / 2)) does not report the loss of rank $r"
done
out=$TMP/n0.out # rank 0 (old rank 0 or 1) reports
grep -q "^elastic: training step failed at step [0-9]* (rank(s) [0-9, ]* gone): world 4 -> $((4 - lost)) " "$out" ||
    fail "no recovery to world $((4 - lost)) reported"
got=$(sed -n 's/^epoch [0-9]* step \([0-9]*\): .*/\1/p' "$out" | tr '\n' ' ')
want=$(seq 1 "$STEPS" | tr '\n' ' ')
[ "$got" = "$want" ] || fail "steps logged: $got; expected $want"
grep -q "check-sync: parameters, optimizer state identical on all $AFTER rank(s)" "$out" ||
    fail "the survivors' replicas are not shown identical"
[ "$FAILED" -eq 0 ] || show "$TMP/n0.out" "$TMP/n0.err" "$TMP/n1.out" "$TMP/n1.err"
finish
