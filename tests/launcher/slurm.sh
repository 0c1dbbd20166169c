#!/bin/sh
# A real one-host Slurm cluster (Debian's slurm-wlm: slurmctld + slurmd, run
# here as children of the test, in the foreground, from a generated
# slurm.conf in the test's directory, on ports found free now), and the Slurm
# launch paths typed as docs/LAUNCHER.md and seed 003 print them, with no
# secret set (issue 23: the per-user secret file makes them work):
#   - docs:     #SBATCH --nodes=1 --ntasks-per-node=4 / srun ./my_program
#               (the store at the node list's first host, port 15000 + job id)
#   - seed 003: its batch script (MASTER_ADDR from scontrol show hostnames)
#   - docs:     one spmdrun per node under srun (its port from PET_MASTER_PORT)
#   - srun -n 4 spmd-train: one group of 4 that trains once, not 4 alone;
#   - with the MPI backend built: srun --mpi=pmix -N 1 --ntasks-per-node 4
#     spmd-train forms its group over MPI (Open MPI's PMIx client);
#   - a task of another uid (nobody, its own per-user secret) in the same
#     step: refused by the store, and every rank says why within seconds.
# Skips (77) without the Slurm packages or root, or when the daemons cannot
# start here (their error is printed); a slurm.conf they reject fails.
# usage: slurm.sh SPMDRUN WORKER ALLREDUCE SPMD_TRAIN WITH_MPI(0|1)
SPMDRUN=$1 PROG=$3 TRAIN=$4 WITH_MPI=$5
. "$(dirname "$0")/lib.sh"
for c in slurmctld slurmd srun sbatch scontrol sinfo setpriv python3; do
    command -v $c >/dev/null 2>&1 || { echo "SKIP: no $c (apt-get install slurm-wlm)"; exit 77; }
done
[ "$(id -u)" = 0 ] || { echo "SKIP: the one-host Slurm cluster runs as root"; exit 77; }
unset SPMD_AUTH_TOKEN SPMD_AUTH_FILE SPMD_AUTH
# Nothing of an outer Slurm job leaks in; the clients read our slurm.conf.
for v in $(env | sed -n 's/^\(SLURM[A-Z_]*\)=.*/\1/p'); do unset "$v"; done
SLURM_CONF=$TMP/slurm.conf
XDG_CONFIG_HOME=$TMP/home/.config
export SLURM_CONF XDG_CONFIG_HOME
chmod 711 "$TMP" # nobody must reach its own directory below
mkdir -m 700 "$TMP/home" "$TMP/state" "$TMP/spool"
mkdir -m 711 "$TMP/work"

# free_ports N [run]: N ports free on every address now, any (from the
# kernel, held together so they differ) or a run of N consecutive ones.
free_ports() {
    python3 - "$1" "${2:-any}" <<'PY'
import random, socket, sys
n, run = int(sys.argv[1]), sys.argv[2] == "run"
def bind(p):
    s = socket.socket()
    try:
        s.bind(("0.0.0.0", p))
        return s
    except OSError:
        s.close()
        return None
if not run:
    socks = [bind(0) for _ in range(n)]
    print(*[s.getsockname()[1] for s in socks])
else:
    for _ in range(1000):
        base = random.randrange(15001, 35000 - n)
        socks = [bind(base + i) for i in range(n)]
        ok = all(socks)
        for s in socks:
            if s:
                s.close()
        if ok:
            print(*range(base, base + n))
            break
PY
}

stop_slurm() {
    [ -n "${CTLD:-}" ] && { squeue -h -o %i 2>/dev/null | xargs -r scancel 2>/dev/null; kill "$CTLD" "$SLURMD" 2>/dev/null; wait "$CTLD" "$SLURMD"; }
    CTLD=
    rm -rf "$TMP"
}
trap stop_slurm EXIT
trap 'exit 1' INT TERM HUP

# The store of job J listens on 15000 + J mod 20000: the first job id is
# chosen so that the ports of this test's six jobs are free.
JOBPORTS=$(free_ports 6 run)
[ -n "$JOBPORTS" ] || { fail "no 6 consecutive free ports in 15001..34999"; finish; }
FIRSTJOB=$((${JOBPORTS%% *} - 15000))

# start_slurm: the daemons on fresh free ports; 0 once the node is idle, 1
# when a daemon exited (its log in $TMP/*.log), 2 when not ready in 60 s.
start_slurm() {
    set -- $(free_ports 2)
    cat >"$SLURM_CONF" <<EOF
ClusterName=spmdtest
SlurmctldHost=$(hostname -s)(127.0.0.1)
SlurmctldPort=$1
SlurmdPort=$2
AuthType=auth/none
CredType=cred/none
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$TMP/state
SlurmdSpoolDir=$TMP/spool
SlurmctldPidFile=$TMP/slurmctld.pid
SlurmdPidFile=$TMP/slurmd.pid
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SlurmdParameters=config_overrides
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MailProg=/bin/true
FirstJobId=$FIRSTJOB
# a loaded machine answers late
MessageTimeout=60
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
NodeName=localhost NodeAddr=127.0.0.1 CPUs=16 State=UNKNOWN
PartitionName=common Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
    # Killed with the test, whatever ends it (SIGKILL by ctest's timeout too).
    setpriv --pdeathsig KILL slurmctld -D -c -i -f "$SLURM_CONF" >"$TMP/slurmctld.log" 2>&1 &
    CTLD=$!
    setpriv --pdeathsig KILL slurmd -D -N localhost -f "$SLURM_CONF" >"$TMP/slurmd.log" 2>&1 &
    SLURMD=$!
    _end=$(($(now_ms) + 60000))
    while [ "$(now_ms)" -lt $_end ]; do
        kill -0 $CTLD 2>/dev/null && kill -0 $SLURMD 2>/dev/null || return 1
        [ "$(sinfo -h -o %T 2>/dev/null)" = idle ] && return 0
        sleep 0.1 # polling the daemons' readiness, bounded by the deadline
    done
    return 2
}
for try in 1 2 3; do
    start_slurm
    up=$?
    [ $up -eq 1 ] || break
    # A port taken between the probe and the daemon's bind: again, new ports.
    grep -q "Address already in use" "$TMP"/slurm*.log || break
    kill $CTLD $SLURMD 2>/dev/null
    wait $CTLD $SLURMD
    rm -rf "$TMP/state"/* "$TMP/spool"/*
done
# A configuration they reject is this test's bug; anything else, this machine's.
if [ $up -eq 1 ] && grep -Eiq "invalid|parse|unrecognized|slurm.conf" "$TMP"/slurm*.log; then
    fail "the Slurm daemons reject the generated slurm.conf"
    show "$TMP"/slurm*.log
    finish
fi
if [ $up -eq 1 ]; then
    echo "SKIP: the Slurm daemons cannot start here:"
    tail -n 5 "$TMP/slurmctld.log" "$TMP/slurmd.log"
    exit 77
fi
[ $up -eq 0 ] || { fail "the Slurm node is not idle after 60 s"; show "$TMP"/slurm*.log; finish; }

cp "$PROG" "$TMP/work/my_program"
cd "$TMP/work" || exit 1

# The three batch scripts are submitted at once (sbatch --wait looks at its
# job every few seconds: in turn they would take 30 s) and run side by side
# (16 CPUs configured; each job's store on its own port).
cat >docs.sbatch <<'EOF'
#!/bin/sh
#SBATCH --nodes=1 --ntasks-per-node=4
srun ./my_program
EOF
# seed 003's batch script as printed: the venv line dropped, our program for
# ddp.py, for its MASTER_PORT one found free.
sed "s/12340/$(free_ports 1)/" >seed003.sh <<'EOF'
#!/usr/bin/env bash
#
#SBATCH --job-name=bml_lab1
#SBATCH --partition=common
#SBATCH --qos=your_quos
#SBATCH --time=5
#SBATCH --output=output.txt
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=4

export MASTER_PORT=12340
export WORLD_SIZE=${SLURM_NPROCS}

echo "NODELIST="${SLURM_NODELIST}
echo "WORLD_SIZE="${SLURM_NPROCS}

master_addr=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export MASTER_ADDR=$master_addr
echo "MASTER_ADDR="$MASTER_ADDR

srun ./my_program
EOF
cat >agent.sbatch <<'EOF'
#!/bin/sh
#SBATCH --nodes=1 --ntasks-per-node=1
head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
srun sh -c 'exec spmdrun --nnodes "$SLURM_NNODES" --node-rank "$SLURM_NODEID" \
    --nproc-per-node 4 --master-addr '"$head"' --rdzv-id "$SLURM_JOB_ID" ./my_program'
EOF
# submit SCRIPT: sbatch --wait; the job id in SCRIPT.id, the status in SCRIPT.rc
submit() {
    timeout 100 sbatch --parsable --wait "$1" >"$1.id" 2>"$1.err"
    echo $? >"$1.rc"
}
submit docs.sbatch &
J1=$!
submit seed003.sh &
J2=$!
# spmdrun's store port (29500 by default) from PET_MASTER_PORT, found free
(PET_MASTER_PORT=$(free_ports 1) PATH=$(dirname "$SPMDRUN"):$PATH
    export PET_MASTER_PORT PATH
    submit agent.sbatch) &
J3=$!
wait $J1 $J2 $J3
# job_ok SCRIPT: it ran as one of this test's first three jobs; OUT: its output file
job_ok() {
    _id=$(cat "$1.id") OUT=${2:-slurm-$_id.out}
    [ "$(cat "$1.rc")" = 0 ] || fail "sbatch $1 exited $(cat "$1.rc")"
    [ "$_id" -ge "$FIRSTJOB" ] && [ "$_id" -le $((FIRSTJOB + 2)) ] || fail "$1 ran as job '$_id'"
    [ "$FAILED" -eq 0 ] || show "$1.err" "$OUT"
}

# 1. docs/LAUNCHER.md's batch script (on one node): no MASTER_ADDR/PORT, the
# store at the node list's first host, port 15000 + the job id.
job_ok docs.sbatch
expect_count "$OUT" '^allreduce ok rank [0-3] of 4 sum 10$' 4
[ "$FAILED" -eq 0 ] || show "$OUT"

# 2. seed 003's batch script.
job_ok seed003.sh output.txt
expect_line output.txt "MASTER_ADDR=localhost"
expect_line output.txt "WORLD_SIZE=4"
expect_count output.txt '^allreduce ok rank [0-3] of 4 sum 10$' 4
[ "$FAILED" -eq 0 ] || show output.txt

# 3. docs/LAUNCHER.md's one spmdrun per node (one node here), as printed.
job_ok agent.sbatch
expect_count "$OUT" '^allreduce ok rank [0-3] of 4 sum 10$' 4
[ "$FAILED" -eq 0 ] || show "$OUT"

# 4. spmd-train under srun: one group of 4 (rank 0 reports it once), trained to the end.
OMP_NUM_THREADS=1 timeout 100 srun -n 4 "$TRAIN" --model mlp --train-samples 256 --test-samples 64 \
    --batch-size 16 --quiet >train.out 2>train.err || fail "srun spmd-train exited $?"
expect_count train.out '^spmd-train: mlp, world 4: 4 steps, 256 samples in ' 1
grep -q "world 1" train.out train.err && fail "a task trained alone"
[ "$FAILED" -eq 0 ] || show train.out train.err

# 5. docs/LAUNCHER.md's srun with the MPI backend (SPMD_BACKEND=auto picks
# MPI under srun --mpi=pmix without MASTER_ADDR/PORT).  Sanitizer builds:
# each task runs with the MPI tests' settings (SPMD_TEST_MPI_ENV from cmake;
# srun's own environment stays as it is).
if [ "$WITH_MPI" = 1 ]; then
    # shellcheck disable=SC2086 # words VAR=value
    OMP_NUM_THREADS=1 timeout 100 srun --mpi=pmix -N 1 --ntasks-per-node 4 \
        env ${SPMD_TEST_MPI_ENV:-} "$TRAIN" --model mlp \
        --train-samples 256 --test-samples 64 --batch-size 16 >pmix.out 2>pmix.err ||
        fail "srun --mpi=pmix spmd-train exited $?"
    expect_count pmix.out '^spmd-train: mlp on fashion-mnist .*, world 4 (backend mpi)' 1
    expect_count pmix.out '^spmd-train: mlp, world 4: 4 steps, 256 samples in ' 1
    [ "$FAILED" -eq 0 ] || show pmix.out pmix.err
fi

# 6. Task 3 of the step runs as nobody, with its own per-user secret: refused;
# ranks 0-2 learn it from rank 0's store in seconds (their deadline is 30 s,
# and a timeout would say "timed out"), naming the refused client and rank.
mkdir -m 700 "$TMP/nobody" && chown nobody "$TMP/nobody"
cat >mixed.conf <<EOF
0-2 ./my_program
3 setpriv --reuid=nobody --regid=nogroup --clear-groups env XDG_CONFIG_HOME=$TMP/nobody/.config ./my_program
EOF
timeout 100 srun -n 4 --multi-prog mixed.conf >mixed.out 2>&1 && fail "a task of another uid was let in"
expect_count mixed.out 'rank 3: cannot reach the store at localhost:[0-9]*: .*wrong job secret' 1
expect_count mixed.out 'rank [0-2]: .*the store refused 1 client(s) during the rendezvous (the last: client 127.0.0.1:[0-9]*: wrong job secret' 3
expect_count mixed.out 'rank(s) 3 never connected' 3
grep -q "timed out" mixed.out && fail "a rank waited out its deadline"
[ "$FAILED" -eq 0 ] || show mixed.out
finish
