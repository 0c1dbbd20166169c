#!/bin/sh
# spmdrun --on-failure shrink: examples/elastic_sgd at world 4, rank VICTIM
# SIGKILLs itself at step 7 (with "stop": SIGSTOPs itself, the others give up
# on it after the 1 s heartbeat timeout and spmdrun ends it once they are
# done); spmdrun reports the loss and keeps the others running; they shrink,
# finish with bit-identical weights, and spmdrun exits 0.
#   check_spmdrun_shrink.sh <spmdrun> <examples dir> <victim> [stop]
set -u
out=$(mktemp /tmp/spmd_spmdrun_shrink_XXXXXX) || exit 1
trap 'rm -f "$out" "$out.err"' EXIT
hb=0 # heartbeats only where a worker is stopped: no false alarm elsewhere
[ -z "${4:-}" ] || hb=1
SPMD_TIMEOUT=60s SPMD_HEARTBEAT_TIMEOUT=$hb "$1" --standalone --nproc-per-node 4 --on-failure shrink \
    "$2/elastic_sgd" env:// "$3" 7 ${4:-} > "$out" 2> "$out.err"
rc=$?
cat "$out" "$out.err"
[ $rc = 0 ] || { echo "spmdrun exited $rc"; exit 1; }
grep -q "rank $3 (pid [0-9]*) was killed by signal 9" "$out.err" || { echo "the loss is not reported"; exit 1; }
[ -z "${4:-}" ] || grep -q "rank $3 (pid [0-9]*) is stopped and the other workers are done" "$out.err" ||
    { echo "the stopped worker was not ended"; exit 1; }
grep -q "1 worker(s) lost, the other 3 finished" "$out.err" || { echo "no summary"; exit 1; }
[ "$(grep -c 'after 40 steps at world 3' "$out")" = 3 ] || { echo "not three survivors at world 3"; exit 1; }
[ "$(sed 's/^rank [0-9]*: //' "$out" | sort -u | wc -l)" = 1 ] || { echo "the survivors' weights differ"; exit 1; }
exit 0
