#!/bin/sh
# under_load.sh BUILD [ROUNDS] [HOGS] [REGEX] — run a set of ctest tests
# ROUNDS times in a row (default 10) with HOGS CPU-bound processes beside
# them (default 2: one per core on a 2-core machine, the load CI met when
# test_rpc hung for 120 s under ThreadSanitizer, issue 28).  Stops at the
# first failing round and shows its output.  The hogs are bench/hogs.sh's:
# bounded, and ended on any exit of this script.
#   tests/load/under_load.sh build-tsan              # the RPC and p2p suite, 10 rounds
#   tests/load/under_load.sh build-tsan 3 4 test_rpc  # 3 rounds, 4 hogs, one regex
# Run from the source tree; BUILD is a configured and built build directory
# (e.g. build-tsan from `make test-tsan`).  TSAN_OPTIONS as `make test-tsan`.
# Prints per round its time, then "under_load: N passed, M failed".
set -u
BUILD=${1:?usage: under_load.sh BUILD [ROUNDS] [HOGS] [REGEX]}
ROUNDS=${2:-10}
HOGS=${3:-2}
# RPC (every test labelled rpc) and the point-to-point engine beneath it
REGEX=${4:-'^(test_rpc.*|example_rpc_.*|test_dist_autograd|test_bench_rpc|test_p2p|test_p2p_split|test_failure|test_shm_kill)$'}
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../../bench/hogs.sh"
LOG=$(mktemp)
HOGS_CLEANUP='rm -f "$LOG"'
hogs_traps
# bounded: no round of this suite takes half an hour even under ThreadSanitizer
hogs_start "$HOGS" $((ROUNDS * 1800))
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
echo "# $(nproc) cores, $HOGS CPU-bound processes beside the tests, load average $(cut -d' ' -f1-3 /proc/loadavg)"
passed=0 failed=0
r=1
while [ "$r" -le "$ROUNDS" ]; do
    start=$(date +%s)
    (cd "$BUILD" && ctest -j 2 --output-on-failure -LE no-tsan -R "$REGEX") > "$LOG" 2>&1
    rc=$?
    ran=$(sed -n 's/.*tests passed, [0-9]* tests failed out of \([0-9]*\)/\1/p' "$LOG")
    if [ "$rc" -ne 0 ] || [ -z "$ran" ] || [ "$ran" -eq 0 ]; then
        failed=$((failed + 1))
        echo "round $r: FAILED after $(($(date +%s) - start)) s (load $(cut -d' ' -f1 /proc/loadavg)):"
        cat "$LOG"
        break
    fi
    passed=$((passed + 1))
    echo "round $r: $ran tests passed in $(($(date +%s) - start)) s (load $(cut -d' ' -f1 /proc/loadavg))"
    r=$((r + 1))
done
echo "under_load: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
