#!/bin/sh
# Every launch path the seeds and the docs print, with no secret set
# (SPMD_AUTH_TOKEN / SPMD_AUTH_FILE unset): the per-user secret file is
# created on first use and proved by every rank (issue 23).  Run inside two
# network namespaces made here, so the printed default ports (29500, Slurm's
# 15000 + job id) are free and the commands are exactly the documented ones:
#   - the seeds' form: the program forks its ranks and calls spmd_group_init
#     with explicit rank/world, via MASTER_ADDR/MASTER_PORT, tcp://, file://;
#   - README:   mpirun --allow-run-as-root --oversubscribe -np 4 -x MASTER_ADDR=127.0.0.1 ./hello
#   - LAUNCHER: mpirun -np 4 -x SPMD_BACKEND=spmd ./my_program (+ the root flags)
#   - seed 003: mpirun -np 4 -x MASTER_ADDR -x MASTER_PORT ./prog
#   - srun: four processes given exactly the SLURM_* variables srun sets
#     (a real srun and sbatch on a one-host Slurm cluster: slurm.sh);
#   - two nodes: spmdrun --nnodes 2 in each namespace (one shared home);
#   - one rank with a wrong secret: all ranks fail in seconds, naming it;
#   - one rank whose secret file is unsafe (so it has none): the same;
#   - a node whose home lacks the file (another secret) is refused at once.
# usage: nosecret.sh SPMDRUN WORKER ALLREDUCE SELFFORM
SPMDRUN=$1 WORKER=$2 PROG=$3 SELF=$4
. "$(dirname "$0")/lib.sh"
unset SPMD_AUTH_TOKEN SPMD_AUTH_FILE SPMD_AUTH
# A home of its own, so the file is created here, on first use, by racing ranks.
XDG_CONFIG_HOME=$TMP/home/.config; export XDG_CONFIG_HOME
mkdir -m 700 "$TMP/home"
export SPMD_TIMEOUT=120s # a refusal must end a rendezvous in seconds, not at this deadline

netns_pair ns 10.233.0.1 10.233.0.2
ip -n "$NS0" link set "$V0" up && ip -n "$NS1" link set "$V1" up || { fail "namespace setup"; finish; }
IN0="ip netns exec $NS0"

# run NAME CMD...: CMD must succeed; its output in $TMP/NAME.out
run() {
    _n=$1
    shift
    timeout 100 "$@" >"$TMP/$_n.out" 2>&1 || { fail "$_n exited $?: $*"; show "$TMP/$_n.out"; }
}

run self_env $IN0 "$SELF" env 4 29500
expect_count "$TMP/self_env.out" '^selfform ok rank [0-3] of 4$' 4
[ "$(stat -c %a "$XDG_CONFIG_HOME/spmd/secret")" = 600 ] || fail "the per-user secret is not mode 600"
[ "$(stat -c %a "$XDG_CONFIG_HOME/spmd")" = 700 ] || fail "its directory is not mode 700"
run self_tcp $IN0 "$SELF" tcp 4 29501
expect_count "$TMP/self_tcp.out" '^selfform ok rank [0-3] of 4$' 4
run self_file $IN0 "$SELF" file 4 "$TMP/rdzv"
expect_count "$TMP/self_file.out" '^selfform ok rank [0-3] of 4$' 4

# One rank with another secret: every rank fails, long before SPMD_TIMEOUT /
# the program's 120 s (the 100 s guard), each naming the cause; the waiting
# ranks name the refused client's address and the rank that never came.
for bad in 1 3; do
    timeout 100 $IN0 "$SELF" env 4 29503 $bad >"$TMP/bad$bad.out" 2>&1
    rc=$?
    [ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "bad rank $bad: exit $rc"
    expect_count "$TMP/bad$bad.out" "^selfform rank [0-3] failed: rank [0-3]: .*wrong job secret" 4
    expect_text "$TMP/bad$bad.out" "selfform rank $bad failed: rank $bad: cannot reach the store"
    expect_count "$TMP/bad$bad.out" "rank(s) $bad never connected" 3
    [ "$FAILED" -eq 0 ] || show "$TMP/bad$bad.out"
done

# One rank whose secret file others can read has no secret at all: it names
# the file and the fix, and still greets the store without a secret, so the
# waiting ranks learn it in seconds too (not at their deadline).
printf '%s\n' 0123456789abcdef0123456789abcdef-an-exposed-secret >"$TMP/exposed"
chmod 644 "$TMP/exposed"
timeout 100 $IN0 "$SELF" env 4 29504 2 "$TMP/exposed" >"$TMP/exposed.out" 2>&1
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "exposed secret file: exit $rc"
expect_count "$TMP/exposed.out" "^selfform rank 2 failed: .*accessible by group or others (mode 644): chmod 600 $TMP/exposed$" 1
expect_count "$TMP/exposed.out" "rank(s) 2 never connected" 3
expect_count "$TMP/exposed.out" "^selfform rank [013] failed: .*client has no job secret" 3
[ "$FAILED" -eq 0 ] || show "$TMP/exposed.out"

if command -v mpirun >/dev/null 2>&1; then
    cp "$PROG" "$TMP/hello"
    cd "$TMP" || exit 1
    run readme $IN0 mpirun --allow-run-as-root --oversubscribe -np 4 -x MASTER_ADDR=127.0.0.1 ./hello
    expect_count "$TMP/readme.out" '^allreduce ok rank [0-3] of 4 sum 10$' 4
    run launcher_doc $IN0 mpirun --allow-run-as-root --oversubscribe -np 4 -x SPMD_BACKEND=spmd ./hello
    expect_count "$TMP/launcher_doc.out" '^allreduce ok rank [0-3] of 4 sum 10$' 4
    run seed003 $IN0 env MASTER_ADDR=127.0.0.1 MASTER_PORT=29502 \
        mpirun --allow-run-as-root --oversubscribe -np 4 -x MASTER_ADDR -x MASTER_PORT ./hello
    expect_count "$TMP/seed003.out" '^allreduce ok rank [0-3] of 4 sum 10$' 4
    cd - >/dev/null || exit 1
else
    echo "note: mpirun not installed, its three lines not run"
fi

# srun's environment for one node, 4 tasks (job 4242: the store at localhost:19242).
for r in 0 1 2 3; do
    $IN0 env SLURM_JOB_ID=4242 SLURM_JOBID=4242 SLURM_STEP_ID=0 SLURM_PROCID=$r SLURM_LOCALID=$r \
        SLURM_NODEID=0 SLURM_NTASKS=4 SLURM_NPROCS=4 SLURM_NNODES=1 SLURM_NTASKS_PER_NODE=4 \
        SLURM_TASKS_PER_NODE=4 SLURM_JOB_NODELIST=localhost SLURM_NODELIST=localhost \
        SLURM_STEP_NODELIST=localhost SLURMD_NODENAME=localhost \
        timeout 100 "$PROG" >"$TMP/srun.$r.out" 2>&1 &
done
wait
cat "$TMP"/srun.*.out >"$TMP/srun.out"
expect_count "$TMP/srun.out" '^allreduce ok rank [0-3] of 4 sum 10$' 4

# Two nodes, one in each namespace, sharing the home directory.
two_nodes() { # TAG CFG-OF-NODE-1
    start_host "$1.n0" timeout 100 ip netns exec "$NS0" "$SPMDRUN" --nnodes 2 --node-rank 0 --nproc-per-node 2 \
        --master-addr 10.233.0.1 --rdzv-id "$1" "$PROG"
    XDG_CONFIG_HOME=$2 timeout 100 ip netns exec "$NS1" "$SPMDRUN" --nnodes 2 --node-rank 1 \
        --nproc-per-node 2 --master-addr 10.233.0.1 --rdzv-id "$1" "$PROG" >"$TMP/$1.n1.out" 2>"$TMP/$1.n1.err"
    N1RC=$?
}
two_nodes nodes "$XDG_CONFIG_HOME"
wait_host || fail "node 0 exited $?"
[ $N1RC -eq 0 ] || fail "node 1 exited $N1RC"
for r in 0 1; do expect_line "$TMP/nodes.n0.out" "allreduce ok rank $r of 4 sum 10"; done
for r in 2 3; do expect_line "$TMP/nodes.n1.out" "allreduce ok rank $r of 4 sum 10"; done
[ "$FAILED" -eq 0 ] || show "$TMP/nodes.n0.err" "$TMP/nodes.n1.err"

# A node with another home (its own secret file) is refused, at once and clearly.
mkdir -m 700 "$TMP/other"
two_nodes stranger "$TMP/other/.config"
[ $N1RC -ne 0 ] && [ $N1RC -ne 124 ] || fail "a node with another secret was not refused at once ($N1RC)"
grep -q "wrong job secret" "$TMP/stranger.n1.err" || { fail "node 1 does not name the cause"; show "$TMP/stranger.n1.err"; }
# Node 0 learns it from its store in seconds (its join timeout is 600 s; 124:
# the 100 s guard ended it).
wait_host
N0RC=$?
[ $N0RC -ne 0 ] && [ $N0RC -ne 124 ] || fail "node 0 exited $N0RC, not at once with an error"
grep -q "the store refused a client (client 10.233.0.2:[0-9]*: wrong job secret" "$TMP/stranger.n0.err" ||
    { fail "node 0 does not name the refused node and the cause"; show "$TMP/stranger.n0.err"; }
finish
