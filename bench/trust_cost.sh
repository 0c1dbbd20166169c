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
    ( [ -z "$vars" ] || export $vars; "$@" ) >> "$OUT/$file.$mode" 2>> "$OUT/errors" || {
        echo "trust_cost.sh: $file ($mode) failed:" >&2; cat "$OUT/errors" >&2; exit 1; }
}
allreduce() { "$BENCH" --np 2 -o all_reduce -b 4 -e "$1" -f 4 -n "$2" -w 50 -c 0 --outplace-only | awk '!/^#/ && NF {print $1, $6}'; }
pingpong() { "$BENCH" --np 2 -o pingpong -b 4 -e "$1" -f 4 -n "$2" -w 50 | awk '!/^#/ && NF {print $1, $2}'; }
ddp() {
    "$BUILD/tools/spmdrun" --standalone --nproc-per-node 2 "$BUILD/tools/spmd-train" --model cnn --batch-size 16 \
        --steps "$STEPS" --no-eval --quiet --threads 1 2>&1 | sed -n 's/.*: \([0-9][0-9]*\) samples\/s.*/0 \1/p' | tail -1
}

r=1
while [ "$r" -le "$ROUNDS" ]; do
    for m in auth off; do
        run ar "$m" allreduce 4096 2000
        run pp "$m" pingpong 4096 2000
        run ar "${m}_tcp" allreduce 4096 2000
        run pp "${m}_tcp" pingpong 4096 2000
        run ddp "$m" ddp
    done
    for m in plain_tcp enc_tcp; do
        run arbig "$m" allreduce $((16 * 1024 * 1024)) 20
        run ppbig "$m" pingpong $((16 * 1024 * 1024)) 50
    done
    r=$((r + 1))
done
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

# table <file> <mode a> <mode b> <what>: per size, median of each and b/a
table() {
    printf '%10s %14s %14s %8s   %s\n' size "$2" "$3" "$3/$2" "$4"
    for m in "$2" "$3"; do
        sort -n -k1,1 -k2,2 "$OUT/$1.$m" | awk '{v[$1]=v[$1] " " $2; n[$1]++} END {for (s in v) {
            k = split(v[s], a, " "); print s, (k % 2) ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2 }}' |
            sort -n > "$OUT/$1.$m.med"
    done
    join "$OUT/$1.$2.med" "$OUT/$1.$3.med" | awk '{printf "%10d %14.2f %14.2f %8.3f\n", $1, $2, $3, $3 / $2}'
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
