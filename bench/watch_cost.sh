#!/bin/sh
# watch_cost.sh [BUILD] [ROUNDS] [ITERS] — what heartbeats and the flight
# recorder cost (issue 13): the same runs with both on (the default) and off
# (SPMD_HEARTBEAT_TIMEOUT=0 SPMD_RECORDER_ENTRIES=0), interleaved round by
# round so both see the same machine load:
#   - spmd-bench --np 2: 4 B all_reduce and 4 B ping-pong, shared memory and TCP
#     (the small-message latency of bench/compare.sh's spmd part)
#   - ddp_bench.sh's spmd DDP runs: spmdrun -n 2 spmd-train (shared gradients)
#     and --no-shared-grads (every bucket through the group's all_reduce)
#   - an idle group (bench/idle_cost): CPU per second while nobody calls it
# Prints per configuration the median and the best (min time, max samples/s)
# of on and of off, the ratio of the bests (other work on the machine only
# ever adds time, so the best runs are the least disturbed), and the median of
# the per-round ratios on/off (time: above 1 means on is slower; samples/s:
# below 1).
set -u
B=${1:-build}
ROUNDS=${2:-10}
ITERS=${3:-50000}
STEPS=${STEPS:-200}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
OFF="SPMD_HEARTBEAT_TIMEOUT=0 SPMD_RECORDER_ENTRIES=0"
echo "# $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(date -u +%Y-%m-%d)"
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg); $ROUNDS rounds, $ITERS iterations per latency run, $STEPS DDP steps"

# run NAME MODE CMD...: append the run's figure to $TMP/NAME.MODE
run() {
    name=$1 mode=$2
    shift 2
    if [ "$mode" = off ]; then set -- env $OFF "$@"; fi
    case $name in
    ar_*) "$@" 2>/dev/null | awk '!/^#/ && NF {print $6}' >>"$TMP/$name.$mode" ;;
    pp_*) "$@" 2>/dev/null | awk '!/^#/ && NF {print $2}' >>"$TMP/$name.$mode" ;;
    ddp*) "$@" 2>&1 | sed -n 's/.*: \([0-9][0-9]*\) samples\/s.*/\1/p' | tail -1 >>"$TMP/$name.$mode" ;;
    esac
}

COMMON="--model cnn --batch-size 16 --steps $STEPS --no-eval --quiet --threads 1"
r=1
while [ "$r" -le "$ROUNDS" ]; do
    # alternate which mode goes first
    if [ $((r % 2)) -eq 1 ]; then modes="on off"; else modes="off on"; fi
    for m in $modes; do
        for tr in auto tcp; do
            run "ar_$tr" $m env SPMD_TRANSPORT=$tr "$B/tools/spmd-bench" --np 2 -o all_reduce -b 4 -e 4 \
                -n "$ITERS" -w 1000 -c 0 --outplace-only
            run "pp_$tr" $m env SPMD_TRANSPORT=$tr "$B/tools/spmd-bench" --np 2 -o pingpong -b 4 -e 4 \
                -n "$ITERS" -w 1000
        done
        # shellcheck disable=SC2086
        run ddp $m "$B/tools/spmdrun" --standalone --nproc-per-node 2 "$B/tools/spmd-train" $COMMON
        # shellcheck disable=SC2086
        run ddp_allred $m "$B/tools/spmdrun" --standalone --nproc-per-node 2 "$B/tools/spmd-train" $COMMON --no-shared-grads
    done
    r=$((r + 1))
done
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

median() { sort -g "$1" | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
best() { case $2 in ddp*) sort -g "$1" | tail -1 ;; *) sort -g "$1" | head -1 ;; esac; }
printf "%-36s %18s %18s %10s %12s %s\n" configuration "on: median best" "off: median best" "best on/off" \
    "median ratio" "per-round ratios"
for name in ar_auto ar_tcp pp_auto pp_tcp ddp ddp_allred; do
    case $name in
    ar_auto) label="all_reduce 4 B, shm (us)" ;;
    ar_tcp) label="all_reduce 4 B, tcp (us)" ;;
    pp_auto) label="ping-pong 4 B, shm (us)" ;;
    pp_tcp) label="ping-pong 4 B, tcp (us)" ;;
    ddp) label="DDP world 2 (samples/s)" ;;
    ddp_allred) label="DDP --no-shared-grads (samples/s)" ;;
    esac
    paste "$TMP/$name.on" "$TMP/$name.off" | awk '$1 > 0 && $2 > 0 {printf "%.3f\n", $1 / $2}' >"$TMP/$name.ratio"
    bon=$(best "$TMP/$name.on" $name) boff=$(best "$TMP/$name.off" $name)
    printf "%-36s %9s %8s %9s %8s %10s %12s %s\n" "$label" "$(median "$TMP/$name.on")" "$bon" \
        "$(median "$TMP/$name.off")" "$boff" "$(awk "BEGIN {printf \"%.3f\", $bon / $boff}")" \
        "$(median "$TMP/$name.ratio")" "$(sort -g "$TMP/$name.ratio" | paste -sd' ')"
done
# An idle group: CPU its processes use per second while nobody calls it.
echo "# idle group of 2 ranks for 5 s (bench/idle_cost), CPU per idle second, on then off:"
for m in on off; do
    if [ $m = off ]; then set -- env $OFF; else set --; fi
    printf "%-4s %s\n" $m "$("$@" "$B/bench/idle_cost" 5 | sed 's/ of CPU per idle second//' | sort | paste -sd' ')"
done
