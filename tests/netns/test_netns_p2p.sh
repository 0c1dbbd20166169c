#!/bin/sh
# Multi-host test: two network namespaces joined by a veth pair, two ranks in
# each, forming one group of 4 over the namespaces' own addresses.  Skips
# (exit 77) where network namespaces cannot be created.
# Usage: test_netns_p2p.sh <netns_worker binary>
set -u
WORKER=$1
ID=$$
NS0=spmdt0_$ID NS1=spmdt1_$ID
A0=10.231.$((ID % 200)).1 A1=10.231.$((ID % 200)).2
cleanup() {
    ip netns del "$NS0" 2>/dev/null
    ip netns del "$NS1" 2>/dev/null
}
trap cleanup EXIT INT TERM
if ! ip netns add "$NS0" 2>/dev/null; then
    echo "SKIP: cannot create network namespaces here (need root and ip netns)"
    exit 77
fi
ip netns add "$NS1" || exit 1
ip link add "v0_$ID" netns "$NS0" type veth peer name "v1_$ID" netns "$NS1" || exit 1
ip -n "$NS0" addr add "$A0/24" dev "v0_$ID"
ip -n "$NS1" addr add "$A1/24" dev "v1_$ID"
for ns in "$NS0" "$NS1"; do ip -n "$ns" link set lo up; done
ip -n "$NS0" link set "v0_$ID" up
ip -n "$NS1" link set "v1_$ID" up

# The namespaces are private to this test: a fixed port inside them can't clash.
export MASTER_ADDR=$A0 MASTER_PORT=29500 WORLD_SIZE=4 LOCAL_WORLD_SIZE=2 SPMD_TIMEOUT=60 SPMD_TEST_NETNS=1
SPMD_AUTH_TOKEN=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n'); export SPMD_AUTH_TOKEN # the job secret
pids=""
for r in 0 1 2 3; do
    ns=$NS0; [ $r -ge 2 ] && ns=$NS1
    RANK=$r LOCAL_RANK=$((r % 2)) timeout 90 ip netns exec "$ns" "$WORKER" &
    pids="$pids $!"
done
fail=0
for p in $pids; do wait "$p" || fail=1; done
if [ $fail -ne 0 ]; then echo "FAIL: a rank failed"; exit 1; fi
echo "PASS: one group of 4 ranks over two namespaces"
exit 0
