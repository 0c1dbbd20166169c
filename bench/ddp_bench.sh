#!/bin/sh
# ddp_bench.sh — data-parallel training, spmd-train against PyTorch DDP (gloo),
# seed 000's CNN recipe (SGD lr 0.01 momentum 0.5), batch 16 per rank, in the
# same run.
#
#   bench/ddp_bench.sh [BUILD_DIR] [REPEATS] [STEPS]      (defaults: build, 5, 300)
#
# Configurations, run in turn REPEATS times so all see the same machine load
# (spmd rounds and torch rounds alternate):
#   spmd  1 process           spmd-train (the single-process baseline)
#   spmd  DDP                 spmdrun -n 2 spmd-train   (the reducer, overlapped,
#                             1 MiB buckets: fc1's gradient is reduced while the
#                             convolutions' backward runs; the ranks share one
#                             host, so buckets are summed in shared memory
#                             and each rank steps the slices it sums)
#   spmd  DDP --no-shard-step every rank runs the whole optimizer step
#   spmd  DDP --no-shared-grads   the same buckets through the group's all_reduce
#                             (TCP, and cross-memory attach where it waits)
#   spmd  DDP --no-overlap    every bucket reduced after backward
#   spmd  DDP --bucket-cap-mb 25   torch's default cap (the CNN's 2.4 MB of
#                             gradients then sit in one bucket that can only
#                             start when backward ends)
#   spmd  --sync average      seed 000's average_gradients
#   torch 1 process           bench/train_torch.py
#   torch DDP                 bench/train_torch.py --world-size 2 (mp.spawn, gloo)
# Medians (and min-max) of samples/s over all ranks, then: spmd DDP / torch
# DDP, scaling efficiency = world-2 samples/s / (2 x one process) for both,
# overlap / no-overlap, and the per-step breakdown of each configuration's
# median run.
#
# Then, where network namespaces and tc are available (root), the same three
# DDP configurations as two "nodes": two namespaces joined by a veth pair
# shaped to NETNS_RATE each way (tc tbf; default 2gbit, NETNS_RATE=none to
# skip this part), one rank per namespace (spmdrun --nnodes 2), addresses
# 10.233.0.1/2 that exist only inside the namespaces.  On loopback the two
# ranks' computation and communication share two cores, so overlap has no idle
# time to fill; over a slower link the all_reduce waits on the wire, and
# overlap hides that wait behind backward.  SPMD_CMA=0 there: the namespaces
# share one kernel, and cross-memory attach would bypass the shaped link;
# SPMD_SHM=0 for clarity (abstract sockets do not cross network namespaces,
# so the ranks could not share gradients anyway).
#
# One BLAS thread per process on both sides; OPENBLAS_CORETYPE is
# left as the environment sets it (it forces OpenBLAS's kernels for both).
# Needs python3 with torch (Debian: python3-torch; set PYTHON to choose the
# interpreter) and Fashion-MNIST (dataset-fashion-mnist).
set -eu
BUILD=${1:-build}
REPS=${2:-5}
STEPS=${3:-300}
HERE=$(cd "$(dirname "$0")" && pwd)
TRAIN="$BUILD/tools/spmd-train"
SPMDRUN="$BUILD/tools/spmdrun"
PY=${PYTHON:-python3}
for f in "$TRAIN" "$SPMDRUN"; do
    [ -x "$f" ] || { echo "ddp_bench.sh: $f not found (build first)" >&2; exit 1; }
done
"$PY" -c "import torch" 2>/dev/null || { echo "ddp_bench.sh: $PY has no torch (apt-get install python3-torch, or set PYTHON)" >&2; exit 1; }
OUT=$(mktemp -d /tmp/ddp_bench.XXXXXX)
trap 'rm -rf "$OUT"' EXIT INT TERM

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, $(uname -r)"
echo "torch $("$PY" -c 'import torch; print(torch.__version__)'), OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}," \
     "OpenBLAS kernels: $("$TRAIN" --model mlp --steps 1 --no-eval --train-samples 64 | sed -n 's/^BLAS: OpenBLAS \([^ ]*\).*/\1/p')"
echo "recipe: cnn, batch 16 per rank, $STEPS steps (torch: $((STEPS + 10)), the first 10 untimed), $REPS rounds"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"

COMMON="--model cnn --batch-size 16 --steps $STEPS --no-eval --quiet --threads 1"
# name|command (the first field names the result files)
CONFIGS="spmd1|$TRAIN $COMMON
ddp|$SPMDRUN --standalone --nproc-per-node 2 $TRAIN $COMMON
ddp_noov|$SPMDRUN --standalone --nproc-per-node 2 $TRAIN $COMMON --no-overlap
ddp_noshard|$SPMDRUN --standalone --nproc-per-node 2 $TRAIN $COMMON --no-shard-step
ddp_allred|$SPMDRUN --standalone --nproc-per-node 2 $TRAIN $COMMON --no-shared-grads
ddp_cap25|$SPMDRUN --standalone --nproc-per-node 2 $TRAIN $COMMON --bucket-cap-mb 25
average|$SPMDRUN --standalone --nproc-per-node 2 $TRAIN $COMMON --sync average
torch1|$PY $HERE/train_torch.py --model cnn --batch-size 16 --steps $((STEPS + 10))
torchddp|$PY $HERE/train_torch.py --model cnn --batch-size 16 --steps $((STEPS + 10)) --world-size 2"

r=1
while [ "$r" -le "$REPS" ]; do
    echo "$CONFIGS" | while IFS='|' read -r name cmd; do
        # shellcheck disable=SC2086
        $cmd > "$OUT/$name.$r.log" 2>&1 || { echo "ddp_bench.sh: $name failed:" >&2; cat "$OUT/$name.$r.log" >&2; exit 1; }
        sps=$(sed -n 's/.*: \([0-9][0-9]*\) samples\/s.*/\1/p' "$OUT/$name.$r.log" | tail -1)
        echo "$sps $r" >> "$OUT/$name.runs"
    done
    r=$((r + 1))
done
echo "load average after:  $(cut -d' ' -f1-3 /proc/loadavg)"
echo

median() { sort -n "$OUT/$1.runs" | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : int((a[NR/2]+a[NR/2+1])/2)}'; }
range() { sort -n "$OUT/$1.runs" | awk 'NR==1{lo=$1} {hi=$1} END {print lo "-" hi}'; }
median_log() { sort -n "$OUT/$1.runs" | awk '{a[NR]=$2} END {print a[int((NR+1)/2)]}'; }
ratio() { awk "BEGIN {printf \"%.2f\", $1 / $2}"; }

printf '%-34s %10s %14s\n' "configuration" "samples/s" "(min-max)"
echo "$CONFIGS" | while IFS='|' read -r name cmd; do
    case $name in
        spmd1) label="spmd-train, 1 process" ;;
        ddp) label="spmd-train DDP, world 2" ;;
        ddp_noov) label="  --no-overlap" ;;
        ddp_noshard) label="  --no-shard-step" ;;
        ddp_allred) label="  --no-shared-grads" ;;
        ddp_cap25) label="  --bucket-cap-mb 25" ;;
        average) label="  --sync average" ;;
        torch1) label="torch, 1 process" ;;
        torchddp) label="torch DDP (gloo), world 2" ;;
    esac
    printf '%-34s %10s %14s\n' "$label" "$(median "$name")" "($(range "$name"))"
done
echo
S1=$(median spmd1); S2=$(median ddp); SN=$(median ddp_noov); T1=$(median torch1); T2=$(median torchddp)
echo "spmd DDP / torch DDP:              $(ratio "$S2" "$T2")"
echo "scaling efficiency, spmd:          $(ratio "$S2" "$((2 * S1))")   (world-2 / (2 x one process))"
# The same ratio within each round (the one-process run and the world-2 run
# just after it), whose median is less exposed to the machine's drift.
sort -k2 "$OUT/spmd1.runs" > "$OUT/spmd1.byround"
sort -k2 "$OUT/ddp.runs" > "$OUT/ddp.byround"
paired=$(join -1 2 -2 2 "$OUT/spmd1.byround" "$OUT/ddp.byround" | awk '{printf "%.2f\n", $3 / (2 * $2)}' | sort -n)
echo "  per round (paired):              $(echo "$paired" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')" \
     "  (rounds: $(echo "$paired" | paste -sd' '))"
echo "scaling efficiency, torch:         $(ratio "$T2" "$((2 * T1))")"
echo "overlap / --no-overlap:            $(ratio "$S2" "$SN")"
echo "sharded step / --no-shard-step:    $(ratio "$S2" "$(median ddp_noshard)")"
echo "shared gradients / all_reduce:     $(ratio "$S2" "$(median ddp_allred)")"
echo
echo "per-step breakdown of each configuration's median run (rank 0):"
echo "$CONFIGS" | while IFS='|' read -r name cmd; do
    f="$OUT/$name.$(median_log "$name").log"
    line=$(grep -E 'time per step|per step:' "$f" | sed -e 's/^\[rank0\]://' -e 's/.*per step: *//' | tail -1)
    printf '  %-10s %s\n' "$name" "$line"
done

# ---- two namespaces joined by a shaped link ---------------------------------
RATE=${NETNS_RATE:-2gbit}
[ "$RATE" = none ] && exit 0
echo
if ! command -v ip >/dev/null 2>&1 || ! command -v tc >/dev/null 2>&1; then
    echo "netns part skipped: needs ip and tc (iproute2)"; exit 0
fi
NSA=ddpb$$a NSB=ddpb$$b VA=ddpv$$a VB=ddpv$$b
netns_cleanup() {   # deleting a namespace deletes its veth end and the peer too
    ip netns del "$NSA" 2>/dev/null || :
    ip netns del "$NSB" 2>/dev/null || :
    ip link del "$VA" 2>/dev/null || :
    rm -rf "$OUT"
}
trap netns_cleanup EXIT INT TERM
if ! ip netns add "$NSA" 2>/dev/null; then echo "netns part skipped: 'ip netns add' not permitted"; exit 0; fi
ip netns add "$NSB" && ip link add "$VA" type veth peer name "$VB" &&
    ip link set "$VA" netns "$NSA" && ip link set "$VB" netns "$NSB" &&
    ip -n "$NSA" addr add 10.233.0.1/24 dev "$VA" && ip -n "$NSB" addr add 10.233.0.2/24 dev "$VB" &&
    ip -n "$NSA" link set lo up && ip -n "$NSB" link set lo up &&
    ip -n "$NSA" link set "$VA" up && ip -n "$NSB" link set "$VB" up &&
    ip netns exec "$NSA" tc qdisc add dev "$VA" root tbf rate "$RATE" burst 1mb latency 50ms &&
    ip netns exec "$NSB" tc qdisc add dev "$VB" root tbf rate "$RATE" burst 1mb latency 50ms ||
    { echo "netns part skipped: cannot set up the namespaces"; exit 0; }
echo "two nodes: namespaces joined by a veth pair shaped to $RATE each way (tc tbf), one rank each"
NCONFIGS="nddp|
nddp_noov|--no-overlap
nddp_cap25|--bucket-cap-mb 25"
r=1
while [ "$r" -le "$REPS" ]; do
    echo "$NCONFIGS" | while IFS='|' read -r name extra; do
        # shellcheck disable=SC2086
        SPMD_CMA=0 SPMD_SHM=0 ip netns exec "$NSA" "$SPMDRUN" --nnodes 2 --node-rank 0 --nproc-per-node 1 --master-addr 10.233.0.1 \
            --rdzv-id ddpbench "$TRAIN" $COMMON $extra > "$OUT/$name.$r.log" 2>&1 &
        pid=$!
        # shellcheck disable=SC2086
        SPMD_CMA=0 SPMD_SHM=0 ip netns exec "$NSB" "$SPMDRUN" --nnodes 2 --node-rank 1 --nproc-per-node 1 --master-addr 10.233.0.1 \
            --rdzv-id ddpbench "$TRAIN" $COMMON $extra > "$OUT/$name.$r.n1.log" 2>&1 ||
            { echo "ddp_bench.sh: $name (node 1) failed:" >&2; cat "$OUT/$name.$r.n1.log" >&2; exit 1; }
        wait $pid || { echo "ddp_bench.sh: $name (node 0) failed:" >&2; cat "$OUT/$name.$r.log" >&2; exit 1; }
        sps=$(sed -n 's/.*: \([0-9][0-9]*\) samples\/s.*/\1/p' "$OUT/$name.$r.log" | tail -1)
        echo "$sps $r" >> "$OUT/$name.runs"
    done
    r=$((r + 1))
done
printf '%-34s %10s %14s\n' "configuration" "samples/s" "(min-max)"
printf '%-34s %10s %14s\n' "spmd-train DDP (1 MiB buckets)" "$(median nddp)" "($(range nddp))"
printf '%-34s %10s %14s\n' "  --no-overlap" "$(median nddp_noov)" "($(range nddp_noov))"
printf '%-34s %10s %14s\n' "  --bucket-cap-mb 25" "$(median nddp_cap25)" "($(range nddp_cap25))"
echo "overlap / --no-overlap:            $(ratio "$(median nddp)" "$(median nddp_noov)")"
echo "1 MiB / 25 MiB buckets:            $(ratio "$(median nddp)" "$(median nddp_cap25)")"
echo "per-step breakdown of each configuration's median run (rank 0):"
echo "$NCONFIGS" | while IFS='|' read -r name extra; do
    f="$OUT/$name.$(median_log "$name").log"
    printf '  %-10s %s\n' "$name" "$(grep 'time per step' "$f" | sed -e 's/^\[rank0\]://' -e 's/.*per step: *//' | tail -1)"
done
