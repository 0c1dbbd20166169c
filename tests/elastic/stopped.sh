#!/bin/sh
# spmdrun --on-failure shrink with a worker stopped past the heartbeat
# timeout and resumed (stop_worker.c): the others go on at world 3, the
# resumed one learns it was excluded and exits with SPMD_EXIT_EXCLUDED (75),
# which spmdrun counts as a lost worker: it exits 0, says so, and the three
# others end with bit-identical replicas.
#   stopped.sh SPMDRUN STOP_WORKER
set -u
out=$(mktemp /tmp/spmd_elastic_stopped_XXXXXX) || exit 1
trap 'rm -f "$out" "$out.err"' EXIT
fail() { cat "$out" "$out.err"; echo "FAIL: $*"; exit 1; }
SPMD_TIMEOUT=60s SPMD_HEARTBEAT_TIMEOUT=2 "$1" --standalone --nproc-per-node 4 --on-failure shrink "$2" \
    > "$out" 2> "$out.err"
rc=$?
[ $rc = 0 ] || fail "spmdrun exited $rc"
grep -q "rank 2: .*rank 2 was excluded from epoch 1" "$out.err" || fail "the resumed rank does not say it was excluded"
grep -q "rank 2 (pid [0-9]*) exited with code 75 at .*(excluded); --on-failure shrink" "$out.err" ||
    fail "spmdrun does not report the excluded worker"
grep -q "1 worker(s) lost, the other 3 finished" "$out.err" || fail "no summary"
[ "$(grep -c 'replicas identical at world 3 after 40 steps' "$out")" = 3 ] || fail "not three identical survivors"
cat "$out" "$out.err"
exit 0
