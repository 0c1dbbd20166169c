#!/bin/sh
# spmdrun sets torchrun's worker environment for every rank.
# usage: env.sh SPMDRUN WORKER
SPMDRUN=$1 WORKER=$2
. "$(dirname "$0")/lib.sh"

# 4 workers, a chosen run id and role, restarts allowed, the store on a free port.
unset OMP_NUM_THREADS
"$SPMDRUN" --nproc-per-node 4 --master-port 0 --rdzv-id envjob --role trainer --max_restarts 2 --tee 1 \
    "$WORKER" env >"$TMP/o" 2>"$TMP/e" || fail "spmdrun exited $?"
port=$(sed -n 's/^\[rank0\]:MASTER_PORT=//p' "$TMP/o")
[ -n "$port" ] && [ "$port" -gt 0 ] || fail "no MASTER_PORT for rank 0"
for r in 0 1 2 3; do
    for kv in RANK=$r LOCAL_RANK=$r GROUP_RANK=0 ROLE_RANK=$r ROLE_NAME=trainer \
        LOCAL_WORLD_SIZE=4 WORLD_SIZE=4 GROUP_WORLD_SIZE=1 ROLE_WORLD_SIZE=4 \
        MASTER_ADDR=127.0.0.1 MASTER_PORT=$port TORCHELASTIC_RESTART_COUNT=0 \
        TORCHELASTIC_MAX_RESTARTS=2 TORCHELASTIC_RUN_ID=envjob TORCHELASTIC_USE_AGENT_STORE=True \
        SPMD_RESTART_COUNT=0 SPMD_MAX_RESTARTS=2 SPMD_RUN_ID=envjob OMP_NUM_THREADS=1; do
        expect_line "$TMP/o" "[rank$r]:$kv"
    done
done
expect_count "$TMP/o" '^\[rank[0-3]\]:' 76
expect_text "$TMP/e" "setting OMP_NUM_THREADS=1"

# A user's OMP_NUM_THREADS is kept (and no notice); defaults: role, run id; PET_ variables.
OMP_NUM_THREADS=7 PET_NPROC_PER_NODE=2 "$SPMDRUN" --standalone --tee 1 -- "$WORKER" env \
    >"$TMP/o2" 2>"$TMP/e2" || fail "spmdrun (2) exited $?"
for r in 0 1; do
    expect_line "$TMP/o2" "[rank$r]:OMP_NUM_THREADS=7"
    expect_line "$TMP/o2" "[rank$r]:ROLE_NAME=default"
    expect_line "$TMP/o2" "[rank$r]:WORLD_SIZE=2"
done
grep -q OMP_NUM_THREADS "$TMP/e2" && fail "OMP notice although OMP_NUM_THREADS was set"
runid=$(sed -n 's/^\[rank0\]:TORCHELASTIC_RUN_ID=//p' "$TMP/o2")
echo "$runid" | grep -Eq '^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$' ||
    fail "standalone run id '$runid' is not a uuid4"

# One worker: no prefix, no OMP_NUM_THREADS, legacy launch.py spellings accepted.
"$SPMDRUN" --nnode=1 --node_rank=0 --nproc_per_node=1 --use_env --master_port=0 "$WORKER" env \
    >"$TMP/o3" 2>"$TMP/e3" || fail "spmdrun (3) exited $?"
expect_line "$TMP/o3" "RANK=0"
expect_line "$TMP/o3" "WORLD_SIZE=1"
expect_line "$TMP/o3" "OMP_NUM_THREADS=<unset>"
expect_line "$TMP/o3" "TORCHELASTIC_RUN_ID=none"

[ "$FAILED" -eq 0 ] || show "$TMP/o" "$TMP/e" "$TMP/o2" "$TMP/e2" "$TMP/o3" "$TMP/e3"
finish
