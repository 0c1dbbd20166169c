#!/bin/sh
# kill_trials.sh SPMDRUN WORKER TRIALS [MAXWORLD] — SIGKILL one rank at a
# random iteration under spmdrun (worlds 2..MAXWORLD, 4 B and 4 MiB
# all_reduce); spmdrun's report must name the killed rank as the root cause
# every time, and nothing may be left behind.  Prints a summary line:
#   kill_trials: N trials, M named the killed rank, W wrong, H hung
set -u
SPMDRUN=$1 WORKER=$2 TRIALS=$3 MAXW=${4:-4}
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
right=0 wrong=0 hung=0 t=0
while [ "$t" -lt "$TRIALS" ]; do
    world=$((2 + t % (MAXW - 1)))
    r=$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')
    victim=$((r % world)) at=$(((r / 8) % 6))
    if [ $((t % 2)) -eq 0 ]; then bytes=4; else bytes=4194304; fi
    FAULT_MODE=kill FAULT_VICTIM=$victim FAULT_AT=$at FAULT_BYTES=$bytes FAULT_ITERS=8 \
        timeout 120 "$SPMDRUN" --standalone --nproc-per-node="$world" "$WORKER" \
        >"$tmp/out" 2>"$tmp/err"
    rc=$?
    # The root cause is the entry after "Root Cause"; it names rank and signal.
    root=$(sed -n '/Root Cause/,$p' "$tmp/err")
    if [ "$rc" -eq 124 ]; then
        hung=$((hung + 1)); echo "trial $t: HUNG (world $world victim $victim)"
    elif [ "$rc" -ne 0 ] && echo "$root" | grep -q "rank      : $victim (" &&
         echo "$root" | grep -q "SIGKILL"; then
        right=$((right + 1))
    else
        wrong=$((wrong + 1))
        echo "trial $t: world $world victim $victim bytes $bytes rc $rc — report:"; cat "$tmp/err"
    fi
    t=$((t + 1))
done
echo "kill_trials: $TRIALS trials, $right named the killed rank, $wrong wrong, $hung hung"
[ "$wrong" -eq 0 ] && [ "$hung" -eq 0 ]
