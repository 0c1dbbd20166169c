#!/bin/sh
# spmd-bench as nccl-tests users drive it (issue 12): without a launcher it
# refuses instead of measuring one rank; nccl-tests' -g 1 -t 1 -d all -o sum
# work (one table per datatype); other -g/-t values and unknown options are
# refused with what is accepted; under spmdrun its stdout has no [rankN]:
# prefix (nccl-tests parsers read it); --plot into a missing folder fails.
# usage: spmd_bench_cli.sh SPMD_BENCH SPMDRUN
BENCH=$1 SPMDRUN=$2
TMP=$(mktemp -d "${TMPDIR:-/tmp}/spmd-bench-cli.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
FAILED=0
fail() { echo "FAIL: $*" >&2; FAILED=$((FAILED + 1)); }
unset WORLD_SIZE OMPI_COMM_WORLD_SIZE SLURM_NTASKS PMI_SIZE

"$BENCH" -b 8 -e 64 >"$TMP/o1" 2>"$TMP/e1"
[ $? -eq 2 ] || fail "without a launcher: exit status is not 2"
grep -q "no launcher found" "$TMP/e1" || fail "without a launcher: no explanation"
[ -s "$TMP/o1" ] && fail "without a launcher: a table was printed"

OMP_NUM_THREADS=1 "$SPMDRUN" -n 2 --master-port 0 "$BENCH" -g 1 -t 1 -d all -o sum -b 8 -e 64 -f 8 -n 2 -w 1 \
    >"$TMP/o2" 2>"$TMP/e2" || { fail "nccl-tests flags under spmdrun: exit $?"; cat "$TMP/e2" >&2; }
[ "$(grep -c '^# Out of bounds values : 0 OK' "$TMP/o2")" -eq 8 ] || fail "-d all: not 8 clean tables"
grep -q '^\[rank' "$TMP/o2" && fail "stdout under spmdrun carries the [rankN]: prefix"
head -1 "$TMP/o2" | grep -q '^# spmd-bench all_reduce' || fail "the first line is not the nccl-tests header"
grep -Eq '^ +8 +8 +int8 +sum ' "$TMP/o2" || fail "no int8 sum row"

"$BENCH" --np 2 -g 2 >"$TMP/o3" 2>"$TMP/e3" && fail "-g 2 accepted"
grep -q "only -g 1 is meaningful" "$TMP/e3" || fail "-g 2: no explanation"
"$BENCH" --np 2 -Z 1 >"$TMP/o4" 2>"$TMP/e4" && fail "an unknown option accepted"
grep -q -- "--minbytes" "$TMP/e4" || fail "an unknown option: the accepted ones are not listed"
"$BENCH" --np 2 -b 8 -e 8 --csv "$TMP/x.csv" --plot "$TMP/nope/x.png" >"$TMP/o5" 2>"$TMP/e5" && fail "--plot into a missing folder exited 0"
grep -q "nope" "$TMP/e5" || fail "--plot into a missing folder: no explanation"
# --min-ms: the loop runs again, longer, until it lasts that long (a whole
# number of ms; the table is the same)
"$BENCH" --np 2 -b 8 -e 8 -n 1 -w 0 -T 20 >"$TMP/o6" 2>"$TMP/e6" || fail "--min-ms 20: exit $?"
grep -Eq '^ +8 +2 +float +sum ' "$TMP/o6" || fail "--min-ms 20: no all_reduce row"
"$BENCH" --np 2 -o pingpong -b 8 -e 8 -n 1 -T 20 >"$TMP/o7" 2>"$TMP/e7" || fail "pingpong --min-ms 20: exit $?"
grep -Eq '^ +8 +[0-9.]+ +[0-9.]+$' "$TMP/o7" || fail "pingpong --min-ms 20: no row"
"$BENCH" --np 2 -T -5 >"$TMP/o8" 2>"$TMP/e8" && fail "--min-ms -5 accepted"
grep -q -- "-T" "$TMP/e8" || fail "--min-ms -5: the option is not named"
[ "$FAILED" -eq 0 ] || exit 1
echo PASS
