#!/bin/sh
# trust_cost.sh — what the job secret's authentication (SPMD_AUTH) and
# encrypted links (SPMD_ENCRYPT=1) cost, every mode in the same run, rounds
# interleaved so all see the same machine load:
#
#   bench/trust_cost.sh [BUILD_DIR] [ROUNDS] [DDP_STEPS]   (defaults: build, 5, 200)
#
# 1. Small-message latency as bench/compare.sh measures it (spmd-bench
#    all_reduce and ping-pong, 4 B to 4 KiB), authenticated (the default)
#    against SPMD_AUTH=off, under the default transport (shared memory on
#    one host) and SPMD_TRANSPORT=tcp.
# 2. Training as bench/ddp_bench.sh's "spmd-train DDP, world 2" (spmdrun, the
#    CNN, batch 16 per rank), authenticated against SPMD_AUTH=off.
# 3. Encryption over TCP (SPMD_TRANSPORT=tcp): all_reduce 4 B to 16 MiB and
#    ping-pong 4 B to 16 MiB, SPMD_ENCRYPT=1 against plain (both
#    authenticated).
# 4. Connection set-up: bench/auth_setup (store connect, group init with and
#    without authentication, and with SPMD_ENCRYPT=1).
# 5. CPU time per call, which the machine's load disturbs far less than
#    wall time: user + system time of every process (SPMD_SPIN_US=0, so
#    waiting costs none) of a run with N + 10000 all_reduces of 8 bytes
#    minus one with N, and of a DDP run of STEPS + 100 steps minus one of
#    STEPS, authenticated against SPMD_AUTH=off.
# Per size: the median over rounds of each mode, and their ratio.
set -eu
BUILD=${1:-build}
ROUNDS=${2:-5}
STEPS=${3:-200}
BENCH="$BUILD/tools/spmd-bench"
for f in "$BENCH" "$BUILD/tools/spmdrun" "$BUILD/tools/spmd-train" "$BUILD/bench/auth_setup"; do
    [ -x "$f" ] || { echo "trust_cost.sh: $f not found (build first)" >&2; exit 1; }
done
OUT=$(mktemp -d /tmp/trust_cost.XXXXXX)
trap 'rm -rf "$OUT"' EXIT INT TERM
export SPMD_LOG_LEVEL=error
echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(date -u +%Y-%m-%d)"
echo "# $ROUNDS rounds, load average before: $(cut -d' ' -f1-3 /proc/loadavg)"

# mode name -> environment
mode_env() {
    case $1 in
        auth) echo "" ;;
        off) echo "SPMD_AUTH=off" ;;
        auth_tcp) echo "SPMD_TRANSPORT=tcp" ;;
        off_tcp) echo "SPMD_AUTH=off SPMD_TRANSPORT=tcp" ;;
        plain_tcp) echo "SPMD_TRANSPORT=tcp" ;;
        enc_tcp) echo "SPMD_TRANSPORT=tcp SPMD_ENCRYPT=1" ;;
    esac
}

# run <file> <mode> <command...>: append "size value" rows
run() {
    file=$1 mode=$2
    shift 2
    vars=$(mode_env "$mode")
    # shellcheck disable=SC2086
    ( [ -z "$vars" ] || export $vars; "$@" ) > "$OUT/last" 2>> "$OUT/errors" || {
        echo "trust_cost.sh: $file ($mode) failed:" >&2; cat "$OUT/errors" >&2; exit 1; }
    awk -v r="$r" '{print $1, $2, r}' "$OUT/last" >> "$OUT/$file.$mode"
}
allreduce() { "$BENCH" --np 2 -o all_reduce -b 4 -e "$1" -f 4 -n "$2" -w 50 -c 0 --outplace-only | awk '!/^#/ && NF {print $1, $6}'; }
pingpong() { "$BENCH" --np 2 -o pingpong -b 4 -e "$1" -f 4 -n "$2" -w 50 | awk '!/^#/ && NF {print $1, $2}'; }
# CPU seconds of a command and its children: perf's task clock (to the
# microsecond), else user + system time (to 10 ms)
cpu() {
    if command -v perf > /dev/null 2>&1; then
        perf stat -x, -e task-clock -o "$OUT/cpu" env SPMD_SPIN_US=0 "$@" > /dev/null 2>> "$OUT/errors" || return 1
        awk -F, '$3 == "task-clock" {printf "%.6f", $1 / 1000}' "$OUT/cpu"
    else
        /usr/bin/time -f "%U %S" -o "$OUT/cpu" env SPMD_SPIN_US=0 "$@" > /dev/null 2>> "$OUT/errors" || return 1
        awk '{printf "%.3f", $1 + $2}' "$OUT/cpu"
    fi
}
cpu_allreduce() {
    a=$(cpu "$BENCH" --np 2 -o all_reduce -b 8 -e 8 -n 1000 -w 0 -c 0 --outplace-only)
    b=$(cpu "$BENCH" --np 2 -o all_reduce -b 8 -e 8 -n 11000 -w 0 -c 0 --outplace-only)
    awk -v a="$a" -v b="$b" 'BEGIN {printf "8 %.3f\n", (b - a) / 10000 * 1e6}'
}
cpu_ddp() {
    set -- "$BUILD/tools/spmdrun" --standalone --nproc-per-node 2 "$BUILD/tools/spmd-train" --model cnn \
        --batch-size 16 --no-eval --quiet --threads 1
    a=$(cpu "$@" --steps "$STEPS")
    b=$(cpu "$@" --steps $((STEPS + 100)))
    awk -v a="$a" -v b="$b" 'BEGIN {printf "0 %.3f\n", (b - a) / 100 * 1e3}'
}
ddp() {
    "$BUILD/tools/spmdrun" --standalone --nproc-per-node 2 "$BUILD/tools/spmd-train" --model cnn --batch-size 16 \
        --steps "$STEPS" --no-eval --quiet --threads 1 2>&1 | sed -n 's/.*: \([0-9][0-9]*\) samples\/s.*/0 \1/p' | tail -1
}

r=1
while [ "$r" -le "$ROUNDS" ]; do
    # which mode goes first alternates, so a drift in the load favours neither
    first=auth second=off
    [ $((r % 2)) = 0 ] && first=off second=auth
    for m in $first $second; do
        run ar "$m" allreduce 4096 2000
        run pp "$m" pingpong 4096 2000
        run ar "${m}_tcp" allreduce 4096 2000
        run pp "${m}_tcp" pingpong 4096 2000
        run ddp "$m" ddp
        run cpuar "$m" cpu_allreduce
        run cpuar "${m}_tcp" cpu_allreduce
        run cpuddp "$m" cpu_ddp
    done
    first=plain_tcp second=enc_tcp
    [ $((r % 2)) = 0 ] && first=enc_tcp second=plain_tcp
    for m in $first $second; do
        run arbig "$m" allreduce $((16 * 1024 * 1024)) 20
        run ppbig "$m" pingpong $((16 * 1024 * 1024)) 50
    done
    r=$((r + 1))
done
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

# median of the second field per first field: "key median"
medians() {
    sort -n -k1,1 -k2,2g | awk '{v[$1]=v[$1] " " $2} END {for (s in v) {
        k = split(v[s], a, " "); print s, (k % 2) ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2 }}' | sort -n
}
# table <file> <mode a> <mode b> <what>: per size, the median of each mode,
# their ratio, and the median of the ratios within each round (paired: the
# two modes ran one after the other), with the smallest and largest of those
table() {
    printf '%10s %12s %12s %8s %8s %15s   %s\n' size "$2" "$3" "$3/$2" paired "(min-max)" "$4"
    for m in "$2" "$3"; do medians < "$OUT/$1.$m" > "$OUT/$1.$m.med"; done
    awk 'FNR==NR {a[$1 " " $3]=$2; next} ($1 " " $3) in a {print $1, $2 / a[$1 " " $3]}' \
        "$OUT/$1.$2" "$OUT/$1.$3" > "$OUT/$1.ratios"
    medians < "$OUT/$1.ratios" > "$OUT/$1.ratio.med"
    sort -n -k1,1 -k2,2g "$OUT/$1.ratios" | awk '{if (!($1 in lo)) lo[$1]=$2; hi[$1]=$2} END {for (s in lo) print s, lo[s], hi[s]}' |
        sort -n > "$OUT/$1.range"
    join "$OUT/$1.$2.med" "$OUT/$1.$3.med" | join - "$OUT/$1.ratio.med" | join - "$OUT/$1.range" |
        awk '{printf "%10d %12.2f %12.2f %8.3f %8.3f %7.2f-%-7.2f\n", $1, $2, $3, $3 / $2, $4, $5, $6}'
}
echo
echo "# 1. small messages, us (median of $ROUNDS rounds); ratio above 1: SPMD_AUTH=off is slower"
table ar auth off "all_reduce, default transport"
table pp auth off "ping-pong half round trip, default transport"
table ar auth_tcp off_tcp "all_reduce, SPMD_TRANSPORT=tcp"
table pp auth_tcp off_tcp "ping-pong, SPMD_TRANSPORT=tcp"
echo
echo "# 2. spmd-train DDP, world 2, samples/s (median of $ROUNDS rounds); ratio below 1: SPMD_AUTH=off is slower"
table ddp auth off "cnn, batch 16 per rank, $STEPS steps"
echo
echo "# 3. encryption over TCP, us (median of $ROUNDS rounds); ratio: what SPMD_ENCRYPT=1 costs"
table arbig plain_tcp enc_tcp "all_reduce"
table ppbig plain_tcp enc_tcp "ping-pong half round trip"
echo
echo "# 4. set-up"
"$BUILD/bench/auth_setup" 2000 20 4
echo
echo "# 5. CPU time per call (all processes, SPMD_SPIN_US=0), median of $ROUNDS rounds"
table cpuar auth off "us per all_reduce of 8 B, default transport"
table cpuar auth_tcp off_tcp "us per all_reduce of 8 B, SPMD_TRANSPORT=tcp"
table cpuddp auth off "ms per DDP step (world 2, both ranks)"
