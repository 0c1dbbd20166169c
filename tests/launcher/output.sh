#!/bin/sh
# Output: every console line whole and behind its rank's prefix although the
# workers write in chunks that cut lines; log files under
# <log-dir>/<run-id>/attempt_<k>/<local_rank>/ hold the raw streams;
# --redirects, --tee (also per rank) and --local-ranks-filter.
# usage: output.sh SPMDRUN WORKER
SPMDRUN=$1 WORKER=$2
. "$(dirname "$0")/lib.sh"
N=300

# --tee 3: console and files.
"$SPMDRUN" --nproc-per-node 4 --master-port 0 --rdzv-id out --log-dir "$TMP/logs" --tee 3 \
    "$WORKER" lines $N >"$TMP/o" 2>"$TMP/e" || fail "spmdrun exited $?"
expect_count "$TMP/o" '' $((4 * N))
for r in 0 1 2 3; do
    expect_count "$TMP/o" "^\[rank$r\]:rank=$r line=[0-9]* [a-z]* end\$" $N
    expect_count "$TMP/e" "^\[rank$r\]:rank=$r err=[0-9]* end\$" $((N / 2))
    d="$TMP/logs/out/attempt_0/$r"
    expect_count "$d/stdout.log" "^rank=$r line=[0-9]* [a-z]* end\$" $N
    expect_count "$d/stdout.log" '' $N
    expect_count "$d/stderr.log" "^rank=$r err=[0-9]* end\$" $((N / 2))
done
# Lines of one rank keep their order.
sed -n 's/^\[rank2\]:rank=2 line=\([0-9]*\) .*/\1/p' "$TMP/o" >"$TMP/seq"
seq 0 $((N - 1)) | cmp -s - "$TMP/seq" || fail "rank 2's lines are out of order"

# --redirects 1: stdout only in the files; the filter keeps ranks 0 and 2 on the console.
"$SPMDRUN" --nproc-per-node 4 --master-port 0 --rdzv-id red --log-dir "$TMP/logs" --redirects 1 \
    --local-ranks-filter 0,2 "$WORKER" lines 20 >"$TMP/o2" 2>"$TMP/e2" || fail "spmdrun (2) exited $?"
[ -s "$TMP/o2" ] && fail "redirected stdout reached the console"
expect_count "$TMP/e2" '^\[rank[02]\]:rank=[02] err=' 20
expect_count "$TMP/e2" '^\[rank[13]\]:' 0
for r in 0 1 2 3; do
    expect_count "$TMP/logs/red/attempt_0/$r/stdout.log" "^rank=$r line=" 20
    [ -e "$TMP/logs/red/attempt_0/$r/stderr.log" ] && fail "stderr.log of rank $r without --tee/--redirects 2"
done

# Per-rank form: rank 0 tees both streams, rank 1 nothing.
"$SPMDRUN" --nproc-per-node 2 --master-port 0 --rdzv-id map --log-dir "$TMP/logs" -t 0:3,1:0 \
    "$WORKER" lines 10 >"$TMP/o3" 2>"$TMP/e3" || fail "spmdrun (3) exited $?"
expect_count "$TMP/logs/map/attempt_0/0/stdout.log" '^rank=0 line=' 10
expect_count "$TMP/logs/map/attempt_0/0/stderr.log" '^rank=0 err=' 5
[ -e "$TMP/logs/map/attempt_0/1" ] && fail "rank 1 got a log directory with mode 0"
expect_count "$TMP/o3" '^rank=1 line=' 10

# --log-dir alone keeps both streams; a last line without newline is completed.
"$SPMDRUN" --nproc-per-node 2 --master-port 0 --rdzv-id part --log-dir "$TMP/logs" \
    "$WORKER" partial >"$TMP/o4" 2>"$TMP/e4" || fail "spmdrun (4) exited $?"
expect_line "$TMP/o4" "[rank0]:no newline"
expect_line "$TMP/o4" "[rank1]:no newline"
printf 'no newline' | cmp -s - "$TMP/logs/part/attempt_0/1/stdout.log" || fail "log file is not the raw stream"

[ "$FAILED" -eq 0 ] || show "$TMP/e" "$TMP/e2" "$TMP/e3" "$TMP/e4"
finish
