#!/bin/sh
# linkdrop.sh WORKER [ROUNDS] — a link dropped under an idle job: two network
# namespaces joined by a veth pair, the ranks split between them (shared
# memory inside a namespace, TCP across; and TCP only), worlds 2 and 4.  Once
# the group is formed and every rank waits in a receive nobody sends,
# `ip link set down` cuts the link: no FIN, no RST, the packets just vanish.
# Every rank must fail within seconds naming a rank on the other side (its
# heartbeat stopped, or its connection timed out or lost its route).  Skips (77) without
# network namespaces.  One line per case:
#   linkdrop: world 4 transport auto: every rank named the other side in 2104..2611 ms
set -u
WORKER=$1 ROUNDS=${2:-1}
. "$(dirname "$0")/../launcher/lib.sh"
HB=2 # SPMD_HEARTBEAT_TIMEOUT, seconds

A0=10.232.0.1 A1=10.232.0.2
netns_pair l $A0 $A1
SPMD_AUTH_TOKEN=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n'); export SPMD_AUTH_TOKEN

# one_case WORLD TRANSPORT PORT
one_case() {
    W=$1 T=$2 P=$3 half=$(($1 / 2))
    ip -n "$NS0" link set "$V0" up && ip -n "$NS1" link set "$V1" up || { fail "link up"; return; }
    rm -f "$TMP"/out.* "$TMP"/err.* "$TMP/r0.fifo"
    mkfifo "$TMP/r0.fifo"
    pids=""
    r=0
    while [ $r -lt "$W" ]; do
        ns=$NS0; [ $r -ge $half ] && ns=$NS1
        out="$TMP/out.$r"; [ $r -eq 0 ] && out="$TMP/r0.fifo"
        RANK=$r LOCAL_RANK=$((r % half)) WORLD_SIZE=$W LOCAL_WORLD_SIZE=$half MASTER_ADDR=$A0 MASTER_PORT=$P \
            SPMD_TRANSPORT=$T SPMD_HEARTBEAT_TIMEOUT=$HB SPMD_TIMEOUT=120 SPMD_LOG_LEVEL=error FAULT_MODE=idle \
            timeout 60 ip netns exec "$ns" "$WORKER" >"$out" 2>"$TMP/err.$r" &
        pids="$pids $!"
        r=$((r + 1))
    done
    open_fifo 3 "$TMP/r0.fifo"
    read_until 3 "$TMP/out.0" 1 '^ready$'
    drain 3 "$TMP/out.0"
    d=$!
    grep -q '^ready$' "$TMP/out.0" || { fail "world $W $T: the group did not form"; show "$TMP"/err.*; }
    t0=$(now_ms)
    ip -n "$NS0" link set "$V0" down
    for p in $pids; do wait "$p"; done
    wait $d
    t1=$(now_ms)
    lo=999999 hi=0 r=0
    while [ $r -lt "$W" ]; do
        if [ $r -lt $half ]; then other="[$half-$((W - 1))]"; else other="[0-$((half - 1))]"; fi
        line=$(grep "^rank $r failed after" "$TMP/out.$r")
        if ! echo "$line" | grep -Eq "rank $other (has sent no heartbeat|is unreachable)"; then
            fail "world $W $T: rank $r did not name a rank across the link: '$line'"
            show "$TMP/err.$r"
        fi
        ms=$(echo "$line" | sed -n 's/.*failed after \([0-9]*\) ms.*/\1/p')
        [ -n "$ms" ] && [ "$ms" -lt "$lo" ] && lo=$ms
        [ -n "$ms" ] && [ "$ms" -gt "$hi" ] && hi=$ms
        r=$((r + 1))
    done
    [ $((t1 - t0)) -lt $((HB * 1000 * 4)) ] || fail "world $W $T: the ranks took $((t1 - t0)) ms after the link went down"
    echo "linkdrop: world $W transport $T: every rank named the other side; waits ended after $lo..$hi ms, all gone $((t1 - t0)) ms after the drop"
}

round=0 k=0
while [ $round -lt "$ROUNDS" ]; do
    for W in 2 4; do
        for T in auto tcp; do
            one_case "$W" "$T" $((29500 + k % 100)) # a fresh port: the last job's may linger
            k=$((k + 1))
        done
    done
    round=$((round + 1))
done
finish
