#!/bin/sh
# examples/elastic_sgd at world 4 over a file:// rendezvous (rank 0 hosts the
# store on a free port): rank VICTIM SIGKILLs itself at step 7; the three
# survivors shrink (on the standby store when the victim is rank 0), go on,
# converge, and end with bit-identical weights.
#   check_elastic_sgd.sh <examples dir> <victim>
set -u
bin="$1/elastic_sgd"
victim="$2"
dir=$(mktemp -d /tmp/spmd_elastic_sgd_XXXXXX) || exit 1
trap 'rm -rf "$dir"' EXIT
export WORLD_SIZE=4 SPMD_TIMEOUT=60s SPMD_HEARTBEAT_TIMEOUT=0
SPMD_AUTH_TOKEN=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n'); export SPMD_AUTH_TOKEN
for r in 0 1 2 3; do
    RANK=$r "$bin" "file://$dir/rdv" "$victim" 7 > "$dir/out.$r" 2> "$dir/err.$r" &
    eval "pid$r=\$!"
done
fail=0
for r in 0 1 2 3; do
    eval "wait \$pid$r"
    rc=$?
    if [ "$r" = "$victim" ]; then
        [ "$rc" = 137 ] || { echo "rank $r (the victim): exit $rc, not SIGKILL"; fail=1; }
    elif [ "$rc" != 0 ]; then
        echo "rank $r: exit $rc"; cat "$dir/out.$r" "$dir/err.$r"; fail=1
    fi
done
[ $fail = 0 ] || exit 1
# the same weight, to the bit, on every survivor, at world 3 after 40 steps
n=$(cat "$dir"/out.* | sed 's/^rank [0-9]*: //' | sort -u | wc -l)
cat "$dir"/out.*
grep -q "after 40 steps at world 3" "$dir/out.$(( (victim + 1) % 4 ))" || { echo "not 40 steps at world 3"; exit 1; }
[ "$n" = 1 ] || { echo "the survivors' weights differ"; exit 1; }
grep -h "epoch" "$dir"/err.* | head -3
exit 0
