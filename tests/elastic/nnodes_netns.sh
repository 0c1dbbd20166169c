#!/bin/sh
# spmdrun --nnodes MIN:MAX in place (--on-failure shrink): whole nodes lost
# and joining while spmd-train --elastic runs, across two network namespaces
# (a veth pair; each spmdrun a "node", 2 workers each; node 0 hosts the
# store on a free port).  MODE:
#   lose   --nnodes 1:2, two nodes; once step 3 is logged every process of
#          node 1's namespace (its spmdrun, guard and workers) is SIGKILLed:
#          node 0's workers shrink to world 2 and finish, its spmdrun marks
#          node 1 lost by its keep-alive silence, does not wait for it at the
#          exit barrier, exits 0 and names the lost node in its summary.
#   join   --nnodes 1:2, node 0 alone (world 2); after step 2 its rank 1 is
#          held (SIGSTOP: the group cannot step on), node 1 is started, joins
#          the running round in place, its workers take their join tickets
#          (SPMD_JOIN=1; seen in their info log); rank 1 resumes, the group
#          takes the joiners in at the next step boundary: world 2 -> 4.
#          Before that, a node without --on-failure shrink|replace is
#          refused with its reason (no restart), and so is spmd-train given
#          SPMD_JOIN=1 without --elastic.
#   below  --nnodes 3:3, nodes 0 and 1 in the first namespace, node 2 in the
#          second, whose processes are SIGKILLed after step 2: two nodes
#          left, fewer than MIN: both remaining spmdruns end with an error
#          naming the lost node, exit 1, no hang.
#   replace --on-failure replace, as lose, then a new node is started in
#          the namespace: it waits for room until node 1 is marked lost,
#          joins in place as node 2, and its workers are the replacements
#          the survivors wait for: the job ends at world 4.
#   losehost --nnodes 1:3: node 0 (the store's host, 1 worker) in the
#          first namespace, nodes 1 (2 workers) and 2 (1) in the second; once
#          step 3 is logged rank 1 (on node 1) is held (SIGSTOP) and every process of
#          the first namespace is SIGKILLed: the store moves to node 1's
#          standby (the lowest live node rank) and node 1 prints its
#          endpoint; node 2 follows it.  A new node started in the first
#          namespace with that endpoint joins the running round as node 3;
#          once its worker took its join ticket rank 1 resumes: the group
#          shrinks to world 3 on the same store and takes the joiner in
#          (world 4); all finish with bit-identical replicas and
#          the summaries name the lost store host and where the store went.
#   belowhost --nnodes 3:3, one worker per node, node 0 (the store's host)
#          in the first namespace, nodes 1 and 2 in the second, whose
#          processes of the first are SIGKILLed after step 2: the store
#          moves to node 1, where both remaining spmdruns end with an error
#          naming the lost store host and the minimum, exit 1, no hang.
# Checked every time: the global steps logged are 1..N, each once; where
# the job finishes, --check-sync finds every replica (joiners included)
# bit-identical.  Skips (77) without namespaces or the data.
#   nnodes_netns.sh SPMDRUN SPMD_TRAIN lose|join|below|replace|losehost|belowhost
SPMDRUN=$1 TRAIN=$2 MODE=$3
[ -d /usr/share/datasets/fashion-mnist ] || { echo "no Fashion-MNIST: skipped"; exit 77; }
. "$(dirname "$0")/../launcher/lib.sh"
SPMD_AUTH_TOKEN=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n'); export SPMD_AUTH_TOKEN
netns_pair n 10.232.0.1 10.232.0.2
ip -n "$NS0" link set "$V0" up && ip -n "$NS1" link set "$V1" up || { fail "namespace setup"; finish; }
# SPMD_HEARTBEAT_TIMEOUT=0: a held rank is not given up on (join); the lost
# node's workers are noticed by their closed connections.  The keep-alive
# timeout bounds how long the agents wait for a silent node.
export SPMD_TIMEOUT=120s SPMD_HEARTBEAT_TIMEOUT=0 SPMD_RDZV_KEEPALIVE_TIMEOUT=8s
case $MODE in
lose | replace) NN=1:2 SPMD_RDZV_LAST_CALL=300s ;; # the round waits for node 1 (a hang guard only)
losehost) NN=1:3 SPMD_RDZV_LAST_CALL=300s NPROC=1 ;; # the round waits for all three
join) NN=1:2 SPMD_RDZV_LAST_CALL=0 SPMD_RDZV_KEEPALIVE_TIMEOUT=30s ;; # node 0 starts alone; nobody is lost
below) NN=3:3 ;;
belowhost) NN=3:3 NPROC=1 ;;
*) echo "unknown mode $MODE"; exit 2 ;;
esac
export SPMD_RDZV_LAST_CALL
# 1024 samples, 8 per rank and step: 32 steps per epoch at world 4, far more
# than the test takes to act on the step it waits for (the checks would fail,
# not pass, if the job ended first)
TRAIN_ARGS="--elastic --model cnn --train-samples 1024 --test-samples 64 --batch-size 8 --epochs 2 --log-every 1
            --threads 1 --no-prefetch --check-sync"
PORT=0 ON_FAILURE=shrink
[ "$MODE" = replace ] && ON_FAILURE=replace
node() { # NAME NS [spmdrun options]: a node's spmdrun, output in $TMP/NAME.{out,err}
    _name=$1 _ns=$2
    shift 2
    ip netns exec "$_ns" "$SPMDRUN" --nnodes $NN --nproc-per-node "${NPROC:-2}" --rdzv-backend c10d \
        --rdzv-endpoint "10.232.0.1:$PORT" --rdzv-id nn --on-failure $ON_FAILURE "$@" "$TRAIN" $TRAIN_ARGS
}
# node 0 hosts the store: its port from its stderr, its stdout read as it comes
mkfifo "$TMP/n0.ofifo" "$TMP/n0.efifo"
node n0 "$NS0" --node-rank 0 >"$TMP/n0.ofifo" 2>"$TMP/n0.efifo" &
N0=$!
exec 6<"$TMP/n0.ofifo" 5<"$TMP/n0.efifo" # in the order the writer opens them
read_until 5 "$TMP/n0.err" 1 "hosting the rendezvous store at "
PORT=$(sed -n 's/.*hosting the rendezvous store at [^ ]*:\([0-9]*\) .*/\1/p' "$TMP/n0.err")
[ -n "$PORT" ] || { fail "node 0 did not host the store"; drain 5 "$TMP/n0.err"; wait $N0; show "$TMP/n0.err"; finish; }
drain 5 "$TMP/n0.err"
D0=$!

pids_in() { ip netns pids "$1" | tr '\n' ' '; }
hold_rank1() { # NS: SIGSTOP the worker of RANK=1 in NS (its pid in R1)
    R1=
    for p in $(pids_in "$1"); do
        tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx RANK=1 && R1=$p
    done
    [ -n "$R1" ] && kill -STOP "$R1" || fail "no rank 1 in $1"
}
resume_when_joining() { # FD FILE N [CHECK]: once N join tickets show in FILE (read from FD), CHECK runs and
    # rank 1 resumes; FD drains on (pid DR)
    read_until "$1" "$2" "$3" "joiner: ticket [0-9]* taken; waiting to be admitted"
    [ -z "$4" ] || $4
    kill -CONT "$R1"
    drain "$1" "$2"
    DR=$!
}
joiner_standby() { # losehost: the joiner's stand-ins are node 2's standby, then its own node's, not the
    # store it joined at (node 1's, where the store is now)
    SB=
    for p in $(pids_in "$NS0"); do
        _e=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -x "SPMD_STORE_STANDBY=.*") && SB=${_e#*=}
    done
    case "$SB" in
    "$EP",*) fail "the joiner's stand-ins start at the store: $SB" ;;
    10.232.0.2:[0-9]*,10.232.0.1:[0-9]*) ;;
    *) fail "the joiner's SPMD_STORE_STANDBY is '$SB', expected node 2's then its own node's" ;;
    esac
}
nodes_1_2() { # NS_OF_NODE_1 NS_OF_NODE_2: start them in the background (pids N1 N2)
    node n1 "$1" >"$TMP/n1.out" 2>"$TMP/n1.err" &
    N1=$!
    node n2 "$2" >"$TMP/n2.out" 2>"$TMP/n2.err" &
    N2=$!
}
case $MODE in
lose)
    node n1 "$NS1" >"$TMP/n1.out" 2>"$TMP/n1.err" &
    N1=$!
    read_until 6 "$TMP/n0.out" 1 "^epoch [0-9]* step 3:"
    kill -KILL $(pids_in "$NS1") # the whole node at once
    wait $N1 && fail "node 1 survived its SIGKILL"
    ;;
replace)
    node n1 "$NS1" >"$TMP/n1.out" 2>"$TMP/n1.err" &
    N1=$!
    read_until 6 "$TMP/n0.out" 1 "^epoch [0-9]* step 3:"
    kill -KILL $(pids_in "$NS1")
    wait $N1 && fail "node 1 survived its SIGKILL"
    # a new node in its place: it waits for room (node 1 marked lost), joins
    node n2 "$NS1" >"$TMP/n2.out" 2>"$TMP/n2.err" &
    N2=$!
    ;;
losehost)
    mkfifo "$TMP/n1.efifo" "$TMP/n3.efifo"
    NPROC=2 # (rank 1 held is not its node's only worker: spmdrun ends a stopped worker whose others are done)
    node n1 "$NS1" --node-rank 1 >"$TMP/n1.out" 2>"$TMP/n1.efifo" &
    N1=$!
    NPROC=1
    exec 7<"$TMP/n1.efifo"
    node n2 "$NS1" --node-rank 2 >"$TMP/n2.out" 2>"$TMP/n2.err" &
    N2=$!
    read_until 6 "$TMP/n0.out" 1 "^epoch [0-9]* step 3:"
    hold_rank1 "$NS1" # the group cannot step on without it: room for the joiner
    kill -KILL $(pids_in "$NS0") 2>/dev/null # the store's host, its guard and its worker at once
    read_until 7 "$TMP/n1.err" 1 "hosts it now at .*: start nodes that join later with --rdzv-endpoint "
    EP=$(sed -n 's/.*start nodes that join later with --rdzv-endpoint \([0-9.:]*\)$/\1/p' "$TMP/n1.err")
    drain 7 "$TMP/n1.err"
    D1=$!
    if [ -z "$EP" ]; then # the store did not move: nothing to join (and no hang)
        fail "node 1 did not print the store's new endpoint"
        kill -CONT "$R1"
        : >"$TMP/n3.err"
        N3=$D1 D3=$D1
    else
        SPMD_LOG_LEVEL=info ip netns exec "$NS0" "$SPMDRUN" --nnodes $NN --nproc-per-node 1 --rdzv-backend c10d \
            --rdzv-endpoint "$EP" --rdzv-id nn --on-failure shrink "$TRAIN" $TRAIN_ARGS >"$TMP/n3.out" 2>"$TMP/n3.efifo" &
        N3=$!
        exec 8<"$TMP/n3.efifo"
        resume_when_joining 8 "$TMP/n3.err" 1 joiner_standby
        D3=$DR
    fi
    ;;
join)
    read_until 6 "$TMP/n0.out" 1 "^epoch [0-9]* step 2:"
    hold_rank1 "$NS0"
    # refused, not restarted: a node without --on-failure shrink|replace
    node nx "$NS1" --on-failure restart >"$TMP/nx.out" 2>"$TMP/nx.err" && fail "a node not in place was let in"
    grep -q "round 0 runs in place (--on-failure shrink|replace): start this node with --on-failure shrink or replace" \
        "$TMP/nx.err" || fail "the node not in place was not told why"
    # and spmd-train asked to join without --elastic
    SPMD_JOIN=1 "$TRAIN" --model mlp --train-samples 64 >"$TMP/nj.out" 2>&1 && fail "SPMD_JOIN=1 without --elastic ran"
    grep -q "started to join a running job (SPMD_JOIN=1.*only --elastic can do" "$TMP/nj.out" ||
        fail "SPMD_JOIN=1 without --elastic: no reason given"
    mkfifo "$TMP/n1.efifo"
    SPMD_LOG_LEVEL=info node n1 "$NS1" >"$TMP/n1.out" 2>"$TMP/n1.efifo" &
    N1=$!
    exec 7<"$TMP/n1.efifo"
    resume_when_joining 7 "$TMP/n1.err" 2
    D1=$DR
    ;;
below)
    nodes_1_2 "$NS0" "$NS1"
    read_until 6 "$TMP/n0.out" 1 "^epoch [0-9]* step 2:"
    kill -KILL $(pids_in "$NS1")
    wait $N2 && fail "node 2 survived its SIGKILL"
    ;;
belowhost)
    nodes_1_2 "$NS1" "$NS1"
    read_until 6 "$TMP/n0.out" 1 "^epoch [0-9]* step 2:"
    kill -KILL $(pids_in "$NS0") 2>/dev/null
    ;;
esac
drain 6 "$TMP/n0.out"
wait $N0
rc0=$?
wait $D0

steps_once() { # FILE: the global steps it logs are 1..N, each once
    _got=$(sed -n 's/^epoch [0-9]* step \([0-9]*\): .*/\1/p' "$1" | tr '\n' ' ')
    _n=$(echo "$_got" | wc -w)
    [ "$_n" -gt 3 ] && [ "$_got" = "$(seq 1 "$_n" | tr '\n' ' ')" ] || fail "$1: steps logged: $_got"
}
case $MODE in
losehost)
    [ $rc0 -eq 0 ] && fail "node 0 survived its SIGKILL"
    wait $N1 || fail "node 1's spmdrun exited $?"
    wait $N2 || fail "node 2's spmdrun exited $?"
    wait $N3 || fail "node 3's spmdrun (joined after the store moved) exited $?"
    wait $D1
    wait $D3
    cat "$TMP/n1.out" "$TMP/n2.out" >"$TMP/survivors.out"
    cat "$TMP/n1.err" "$TMP/n2.err" >"$TMP/survivors.err"
    grep -q "^elastic: training step failed at step [0-9]* (rank(s) 0 gone): world 4 -> 3 " "$TMP/survivors.out" ||
        fail "no shrink from world 4 to 3 reported"
    grep -q "^elastic: 1 process(es) joined after step [0-9]*: world 3 -> 4 " "$TMP/survivors.out" ||
        fail "the node started after the move was not taken in (world 3 -> 4)"
    grep -q "^spmdrun: joining round 0 in place as node 3 " "$TMP/n3.err" || fail "node 3 did not join in place"
    grep -q "check-sync: parameters, optimizer state identical on all 4 rank(s)" "$TMP/survivors.out" ||
        fail "the replicas (the joiner's included) are not shown identical"
    grep -q "the launcher's store is gone" "$TMP/survivors.out" "$TMP/survivors.err" &&
        fail "a worker group could not follow the store"
    # the new host says so, the other node follows it; both summaries say it
    grep -q "^spmdrun: the rendezvous store at 10.232.0.1:$PORT is gone with node 0 ([^)]*) (.*); this node (node 1) hosts it now at 10.232.0.2:[0-9]*: start nodes that join later with --rdzv-endpoint 10.232.0.2:[0-9]*" \
        "$TMP/survivors.err" || fail "node 1 does not say it hosts the store now"
    grep -q "^spmdrun: the rendezvous store at 10.232.0.1:$PORT is gone with node 0 ([^)]*) (.*); it moved to node 1 ([^)]*) at 10.232.0.2:[0-9]*" \
        "$TMP/survivors.err" || fail "node 2 does not say where the store moved"
    for f in n1 n2; do
        grep -q "^spmdrun: round 0: node 0 ([^)]*) was lost at [0-9_:-]*: hosted the rendezvous store, which closed its connections (seen by node 1)" \
            "$TMP/$f.err" || fail "$f's summary does not name the lost store host"
        grep -q "^spmdrun: round 0: the store's host, node 0 ([^)]*), was lost at [0-9_:-]*; the store moved to node 1 ([^)]*) at 10.232.0.2:[0-9]*" \
            "$TMP/$f.err" || fail "$f's summary does not say where the store moved"
        grep -q "^spmdrun: round 0 complete with 3 node(s) of the 4 that took part" "$TMP/$f.err" ||
            fail "$f's summary does not count the nodes"
    done
    grep -q "was killed by signal\|exited with code" "$TMP/survivors.err" && fail "a survivor lost a worker of its own"
    # the survivors' rank 0 logs from the recovery on: consecutive steps,
    # each once, taking over where node 0's log ended (its last step at most
    # redone: one that committed only on the killed rank is rolled back).
    # Node 0 may also die inside a step the survivors then finish with its
    # part already received ("the step in flight committed everywhere"):
    # that step is logged by nobody, and the survivors go on after it.
    _last=$(sed -n 's/^epoch [0-9]* step \([0-9]*\): .*/\1/p' "$TMP/n0.out" | tail -n 1)
    _got=$(sed -n 's/^epoch [0-9]* step \([0-9]*\): .*/\1/p' "$TMP/survivors.out" | tr '\n' ' ')
    _first=${_got%% *}
    _upto=$((_last + 1))
    _from=$(sed -n 's/.*the step in flight committed everywhere; going on from step \([0-9]*\) .*/\1/p' \
        "$TMP/survivors.out" | head -n 1)
    [ -n "$_from" ] && [ "$_from" = "$((_last + 2))" ] && _upto=$_from
    [ -n "$_first" ] && [ "$_first" -le "$_upto" ] && [ "$_first" -ge "$_last" ] &&
        [ "$_got" = "$(seq "$_first" $((_first + $(echo "$_got" | wc -w) - 1)) | tr '\n' ' ')" ] ||
        fail "steps: node 0 logged up to ${_last:-none}, the survivors $_got"
    ;;
lose)
    [ $rc0 -eq 0 ] || fail "node 0's spmdrun exited $rc0"
    grep -q "^elastic: training step failed at step [0-9]* (rank(s) [0-9, ]* gone): world 4 -> [23] " "$TMP/n0.out" ||
        fail "no shrink from world 4 reported"
    grep -q "check-sync: parameters, optimizer state identical on all 2 rank(s)" "$TMP/n0.out" ||
        fail "the survivors' replicas are not shown identical"
    grep -q "^spmdrun: node 1 ([^)]*) lost at [0-9_:-]*: sent no keep-alive for [0-9]* s (seen by node 0); 1 node(s) go on" \
        "$TMP/n0.err" || fail "node 0 does not report node 1 lost"
    grep -q "^spmdrun: round 0: node 1 ([^)]*) was lost at [0-9_:-]*: sent no keep-alive" "$TMP/n0.err" ||
        fail "node 0's summary does not name the lost node"
    grep -q "^spmdrun: round 0 complete with 1 node(s) of the 2 that took part" "$TMP/n0.err" ||
        fail "node 0's summary does not count the nodes"
    grep -q "was killed by signal\|exited with code" "$TMP/n0.err" && fail "node 0 lost a worker of its own"
    steps_once "$TMP/n0.out"
    ;;
replace)
    wait $N2 || fail "the new node's spmdrun exited $?"
    [ $rc0 -eq 0 ] || fail "node 0's spmdrun exited $rc0"
    grep -q "^spmdrun: node 1 ([^)]*) lost at " "$TMP/n0.err" || fail "node 0 does not report node 1 lost"
    grep -q "^spmdrun: joining round 0 in place as node 2 (2 node(s) with this one)" "$TMP/n2.err" ||
        fail "the new node did not join in place"
    grep -q "^spmdrun: node 2 ([^)]*, 2 worker(s)) joined round 0 at " "$TMP/n0.err" ||
        fail "node 0 does not report node 2 joining"
    grep -q "check-sync: parameters, optimizer state identical on all 4 rank(s)" "$TMP/n0.out" ||
        fail "not back at world 4 with identical replicas"
    steps_once "$TMP/n0.out"
    ;;
join)
    wait $N1 || fail "node 1's spmdrun exited $?"
    wait $D1
    [ $rc0 -eq 0 ] || fail "node 0's spmdrun exited $rc0"
    grep -q "^spmdrun: joining round 0 in place as node 1 (2 node(s) with this one)" "$TMP/n1.err" ||
        fail "node 1 did not join the running round in place"
    grep -q "^spmdrun: node 1 ([^)]*, 2 worker(s)) joined round 0 at " "$TMP/n0.err" ||
        fail "node 0 does not report node 1 joining"
    grep -q "^elastic: 2 process(es) joined after step [0-9]*: world 2 -> 4 " "$TMP/n0.out" ||
        fail "no grow from world 2 to 4 reported"
    grep -q "check-sync: parameters, optimizer state identical on all 4 rank(s)" "$TMP/n0.out" ||
        fail "the replicas (joiners included) are not shown identical"
    grep -q "asks to join\|restart" "$TMP/n0.err" "$TMP/n1.err" && fail "a restart instead of a join"
    grep -q "^spmdrun: round 0: node 1 ([^)]*) joined at " "$TMP/n0.err" || fail "node 0's summary lacks the join"
    steps_once "$TMP/n0.out"
    ;;
below)
    wait $N1
    rc1=$?
    for i in 0 1; do
        eval "rc=\$rc$i"
        [ "$rc" -eq 1 ] || fail "node $i's spmdrun exited $rc, expected 1"
        grep -q "2 node(s) left, fewer than the minimum 3 (--nnodes 3:3); lost: node [12] ([^)]*) at [0-9_:-]*: sent no keep-alive" \
            "$TMP/n$i.err" || fail "node $i does not name the lost node and the minimum"
    done
    ;;
belowhost)
    [ $rc0 -eq 0 ] && fail "node 0 survived its SIGKILL"
    for i in 1 2; do
        eval "wait \$N$i"
        rc=$?
        [ "$rc" -eq 1 ] || fail "node $i's spmdrun exited $rc, expected 1"
        grep -q "2 node(s) left, fewer than the minimum 3 (--nnodes 3:3); lost: node 0 ([^)]*) at [0-9_:-]*: hosted the rendezvous store, which closed its connections" \
            "$TMP/n$i.err" || fail "node $i does not name the lost store host and the minimum"
    done
    ;;
esac
[ "$FAILED" -eq 0 ] && [ -z "$SHOW_ALL" ] || show "$TMP"/n*.out "$TMP"/n*.err
finish
