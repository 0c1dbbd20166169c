#!/bin/sh
# stop_trials.sh SPMDRUN WORKER TRIALS [MAXWORLD] — SIGSTOP one rank at a random
# iteration under spmdrun (worlds 2..MAXWORLD, 4 B and 4 MiB all_reduce, TCP
# and shared memory alternately, SPMD_HEARTBEAT_TIMEOUT=1).  The survivors'
# messages (those printed before spmdrun ends the rest) must name the frozen
# rank, spmdrun's report must name it as the stopped root cause, and the job
# must end within seconds (test_heartbeat checks every survivor's message
# without a launcher).  Prints:
#   stop_trials: N trials, M named the stopped rank, W wrong, H hung; job ended in A..B ms
set -u
SPMDRUN=$1 WORKER=$2 TRIALS=$3 MAXW=${4:-4}
. "$(dirname "$0")/../launcher/lib.sh"
right=0 wrong=0 hung=0 t=0 lo=999999 hi=0
while [ "$t" -lt "$TRIALS" ]; do
    world=$((2 + t % (MAXW - 1)))
    r=$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')
    victim=$((r % world)) at=$(((r / 8) % 6))
    if [ $((t % 2)) -eq 0 ]; then bytes=4; else bytes=4194304; fi
    if [ $((t / 2 % 2)) -eq 0 ]; then tr=auto; else tr=tcp; fi
    t0=$(now_ms)
    FAULT_MODE=stop FAULT_VICTIM=$victim FAULT_AT=$at FAULT_BYTES=$bytes FAULT_ITERS=8 SPMD_TRANSPORT=$tr \
        SPMD_HEARTBEAT_TIMEOUT=1 timeout 60 "$SPMDRUN" --standalone --nproc-per-node="$world" "$WORKER" \
        >"$TMP/out" 2>"$TMP/err"
    rc=$?
    ms=$(( $(now_ms) - t0 ))
    root=$(sed -n '/Root Cause/,$p' "$TMP/err")
    # the survivors that spoke before spmdrun ended the others blame the victim, and only it
    said=$(grep -c '^\[rank[0-9]*\]:rank [0-9]*: all_reduce [0-9]* failed' "$TMP/err")
    named=$(grep -c "^\[rank[0-9]*\]:rank [0-9]*: all_reduce [0-9]* failed: .*rank $victim has sent no heartbeat" "$TMP/err")
    if [ "$rc" -eq 124 ]; then
        hung=$((hung + 1)); echo "trial $t: HUNG (world $world victim $victim)"; cat "$TMP/err"
    elif [ "$rc" -ne 0 ] && echo "$root" | grep -q "rank      : $victim (" &&
         echo "$root" | grep -q "stopped (SIGSTOP" && [ "$said" -ge 1 ] && [ "$named" -eq "$said" ]; then
        right=$((right + 1))
        [ "$ms" -lt "$lo" ] && lo=$ms
        [ "$ms" -gt "$hi" ] && hi=$ms
    else
        wrong=$((wrong + 1))
        echo "trial $t: world $world victim $victim at $at bytes $bytes $tr rc $rc — report:"; cat "$TMP/err"
    fi
    t=$((t + 1))
done
echo "stop_trials: $TRIALS trials, $right named the stopped rank, $wrong wrong, $hung hung; job ended in $lo..$hi ms"
[ "$wrong" -eq 0 ] && [ "$hung" -eq 0 ]
