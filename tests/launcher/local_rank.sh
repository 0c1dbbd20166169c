#!/bin/sh
# Issue 12 (5, 12, 14): launch.py's --local-rank argument with --pass-local-rank
# (both spellings, off with --use-env, and seed 002's argparse program reading
# --local_rank), -n as --nproc-per-node, stdout straight to the console without
# a prefix unless --tee / --log-dir (torchrun's behaviour) while stderr keeps
# it, and a hint when a .py script is given without python3.
# usage: local_rank.sh SPMDRUN WORKER
SPMDRUN=$1 WORKER=$2
. "$(dirname "$0")/lib.sh"

"$SPMDRUN" -n 2 --master-port 0 --pass-local-rank "$WORKER" args a b >"$TMP/o1" 2>"$TMP/e1" ||
    fail "spmdrun --pass-local-rank exited $?"
for r in 0 1; do expect_line "$TMP/o1" "rank=$r local=$r first=--local-rank=$r args=a|b"; done
"$SPMDRUN" -n 2 --master-port 0 --pass-local-rank=local_rank "$WORKER" args >"$TMP/o2" 2>"$TMP/e2" ||
    fail "spmdrun --pass-local-rank=local_rank exited $?"
for r in 0 1; do expect_line "$TMP/o2" "rank=$r local=$r first=--local_rank=$r args="; done
# torchrun's default, and launch.py's --use-env: no argument
"$SPMDRUN" --nproc_per_node=2 --master-port 0 "$WORKER" args x >"$TMP/o3" 2>"$TMP/e3" || fail "spmdrun exited $?"
"$SPMDRUN" --nproc_per_node=2 --master-port 0 --pass-local-rank --use_env "$WORKER" args x >"$TMP/o4" 2>"$TMP/e4" ||
    fail "spmdrun --use_env exited $?"
for f in o3 o4; do
    for r in 0 1; do expect_line "$TMP/$f" "rank=$r local=$r first= args=x"; done
done
# stdout: no prefix without --tee; with --tee the [rankN]: prefix
expect_count "$TMP/o3" '^\[rank' 0
"$SPMDRUN" -n 2 --master-port 0 --tee 1 "$WORKER" args y >"$TMP/o5" 2>"$TMP/e5" || fail "spmdrun --tee exited $?"
for r in 0 1; do expect_line "$TMP/o5" "[rank$r]:rank=$r local=$r first= args=y"; done
# stderr keeps the prefix (the failure report reads it)
"$SPMDRUN" -n 2 --master-port 0 "$WORKER" exit 3 1 >"$TMP/o6" 2>"$TMP/e6" && fail "a failing job exited 0"
expect_text "$TMP/e6" "[rank1]:rank 1 fails on purpose"

# Seed 002's program: argparse reads --local_rank, as torch < 2.0's launch.py passes it.
if command -v python3 >/dev/null 2>&1; then
    cat >"$TMP/seed002.py" <<'PY'
import argparse, os
parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, default=0)
parser.add_argument("--local_world_size", type=int, default=1)
args = parser.parse_args()
print(f"local_rank {args.local_rank} of {args.local_world_size} env {os.environ['LOCAL_RANK']}")
PY
    "$SPMDRUN" -n 2 --master-port 0 --pass-local-rank=local_rank python3 "$TMP/seed002.py" --local_world_size=2 \
        >"$TMP/o7" 2>"$TMP/e7" || fail "seed 002's program under --pass-local-rank=local_rank exited $?"
    for r in 0 1; do expect_line "$TMP/o7" "local_rank $r of 2 env $r"; done
    # a script given as the program: the message says to put python3 in front
    (cd "$TMP" && "$SPMDRUN" -n 2 seed002.py >"$TMP/o8" 2>"$TMP/e8") && fail "spmdrun seed002.py exited 0"
    expect_text "$TMP/e8" "python3 seed002.py"
fi
[ "$FAILED" -eq 0 ] || show "$TMP/e1" "$TMP/e2" "$TMP/e3" "$TMP/e4" "$TMP/e5" "$TMP/e7"
finish
