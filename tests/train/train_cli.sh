#!/bin/sh
# spmd-train as a new user meets it (issue 12): data sets whose images do not
# fit the model are refused before the first step (7); a state_dict or a
# checkpoint of another model is refused naming the tensor or the model (7);
# corrupt or nonsensical checkpoints are explained at world 1, and a resume
# skips a save killed before its .metadata (8); --plot into a missing folder
# fails at once, a plot is written otherwise (12); the progress line has an
# ETA, shows under spmdrun on a terminal and never wraps (12).
# usage: train_cli.sh SPMD_TRAIN SPMDRUN
TRAIN=$1 SPMDRUN=$2
TMP=$(mktemp -d "${TMPDIR:-/tmp}/spmd-train-cli.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
FAILED=0
fail() { echo "FAIL: $*" >&2; FAILED=$((FAILED + 1)); }
# run NAME WANT_RC CMD...: the exit code must be WANT_RC (never a signal)
run() {
    _name=$1 _want=$2
    shift 2
    "$@" >"$TMP/$_name.out" 2>"$TMP/$_name.err"
    _rc=$?
    [ "$_rc" -eq "$_want" ] || { fail "$_name: exit $_rc, expected $_want"; cat "$TMP/$_name.err" >&2; }
}
has() { grep -Fq -- "$2" "$TMP/$1" || { fail "$1 lacks '$2'"; sed -n 1,5p "$TMP/$1" >&2; }; }

# 7. IDX files of the wrong image size (valid format): refused, both shapes named.
python3 - "$TMP" <<'PY' || exit 1
import os, struct, sys
root = sys.argv[1]
def write(d, prefix, n, h, w):
    os.makedirs(d, exist_ok=True)
    with open(f"{d}/{prefix}-images-idx3-ubyte", "wb") as f:
        f.write(struct.pack(">IIII", 0x803, n, h, w) + bytes((i * 7) % 256 for i in range(n * h * w)))
    with open(f"{d}/{prefix}-labels-idx1-ubyte", "wb") as f:
        f.write(struct.pack(">II", 0x801, n) + bytes(i % 10 for i in range(n)))
for h, w in [(1, 1), (3, 3), (27, 28), (29, 29), (64, 64)]:
    d = f"{root}/data{h}x{w}"
    write(d, "train", 64, h, w)
    write(d, "t10k", 32, h, w)
d = f"{root}/testwrong"            # right training images, 27x28 test images
write(d, "train", 64, 28, 28)
write(d, "t10k", 32, 27, 28)
d = f"{root}/small"                # a small data set of the right shape
write(d, "train", 160, 28, 28)
write(d, "t10k", 48, 28, 28)
PY
for s in 1x1 3x3 27x28 29x29 64x64; do
    for m in cnn mlp; do
        run "shape_${m}_$s" 1 "$TRAIN" --model $m --data "$TMP/data$s" --steps 2 --quiet
        has "shape_${m}_$s.err" "1x$(echo $s | sed 's/x/x/')"
        has "shape_${m}_$s.err" "which takes 1x28x28"
    done
done
run shape_test 1 "$TRAIN" --model cnn --data "$TMP/testwrong" --steps 2 --quiet
has shape_test.err "the test images"
has shape_test.err "1x27x28"
# issue 29: the cause, not the "ranks disagree" text of SPMD_ERR_MISMATCH (one process has no other rank)
for f in shape_cnn_3x3.err shape_mlp_64x64.err shape_test.err; do
    grep -qi "disagree" "$TMP/$f" && { fail "$f: a data set that does not fit is reported as ranks disagreeing"; cat "$TMP/$f" >&2; }
done

# 12. --plot into a missing folder: refused before training, nothing on stdout.
run plot_missing 2 "$TRAIN" --model mlp --data "$TMP/testwrong" --plot "$TMP/nope/curve.png"
has plot_missing.err "the folder $TMP/nope does not exist"
[ -s "$TMP/plot_missing.out" ] && fail "--plot into a missing folder wrote to stdout"

Q="--data $TMP/small --train-samples 96 --batch-size 16 --no-eval --quiet"

# 12. a plot that can be written is written
if command -v gnuplot >/dev/null 2>&1; then
    run plot_ok 0 "$TRAIN" --model mlp $Q --steps 3 --plot "$TMP/curve.png"
    [ -s "$TMP/curve.png" ] || fail "--plot wrote no image"
fi

# 7. a state_dict or checkpoint of another model
run save_mlp 0 "$TRAIN" --model mlp $Q --steps 2 --save-model "$TMP/mlp.safetensors"
run load_wrong 1 "$TRAIN" --model cnn $Q --epochs 0 --load-model "$TMP/mlp.safetensors"
has load_wrong.err "conv1.weight"
run ck_mlp 0 "$TRAIN" --model mlp $Q --steps 2 --checkpoint-dir "$TMP/ck"
[ -s "$TMP/ck/step-2/.metadata" ] && [ -s "$TMP/ck/step-2/__0_0.distcp" ] || fail "--checkpoint-dir wrote no DIR/step-2"
run resume_wrong 1 "$TRAIN" --model cnn $Q --steps 4 --checkpoint-dir "$TMP/ck" --resume
has resume_wrong.err "holds a mlp model; this run trains cnn"
run resume_optim 1 "$TRAIN" --model mlp $Q --steps 4 --optimizer adam --resume "$TMP/ck"
has resume_optim.err "holds a sgd optimizer state; this run uses adam"

# issue 26: a layout no resharding can satisfy (the CNN of 3-channel CIFAR-10 into the CNN of
# 1-channel images) is refused naming the tensor and both shapes
python3 - "$TMP/cifar" <<'PY' || exit 1
import os, sys
os.makedirs(sys.argv[1])
for n in ["data_batch_%d.bin" % i for i in range(1, 6)] + ["test_batch.bin"]:
    open(os.path.join(sys.argv[1], n), "wb").write(bytes([1] + [5] * 3072) * 16)
PY
run ck_cifar 0 "$TRAIN" --model cnn --dataset cifar10 --data "$TMP/cifar" --no-eval --quiet --steps 1 --checkpoint-dir "$TMP/ckc"
run resume_shape 1 "$TRAIN" --model cnn $Q --steps 2 --resume "$TMP/ckc"
has resume_shape.err "model.conv1.weight: saved with global shape [32, 3, 3, 3], wanted [32, 1, 3, 3]"

# 8. corrupt checkpoints at world 1: what is wrong with the file, not "ranks disagree"
cp -r "$TMP/ck/step-2" "$TMP/good"
patch_state() { # FIELD VALUE: set trainer.state[FIELD] in the rank file (stored uncompressed)
    python3 - "$TMP/ck/step-2/__0_0.distcp" "$1" "$2" <<'PY'
import struct, sys
path, field, value = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
b = bytearray(open(path, "rb").read())
# epoch 0, step 2 of the epoch, 2 steps, 2 optimizer steps, world 1, 1 replica, batch 16, pp 1, tp 1, no ZeRO, version 1
state = struct.pack("<11q", 0, 2, 2, 2, 1, 1, 16, 1, 1, 0, 1)
at = b.find(state)
assert at >= 0 and b.find(state, at + 1) < 0, "trainer.state not found once"
b[at + 8 * field:at + 8 * field + 8] = struct.pack("<q", value)
open(path, "wb").write(b)
PY
}
i=0
for case in "0 -9223372036854775808" "0 -1" "1 -5" "2 -1" "3 99" "5 0" "6 0" "10 7"; do
    rm -rf "$TMP/ck/step-2" && cp -r "$TMP/good" "$TMP/ck/step-2"
    patch_state $case
    i=$((i + 1))
    run "state$i" 1 "$TRAIN" --model mlp $Q --steps 4 --checkpoint-dir "$TMP/ck" --resume
    has "state$i.err" "trainer.state is not a position this run can continue from"
    grep -qi "disagree" "$TMP/state$i.err" && fail "state$i: reported as a disagreement of ranks"
done
rm -rf "$TMP/ck/step-2" && cp -r "$TMP/good" "$TMP/ck/step-2"
head -c 100 "$TMP/good/__0_0.distcp" >"$TMP/ck/step-2/__0_0.distcp"
run truncated 1 "$TRAIN" --model mlp $Q --steps 4 --checkpoint-dir "$TMP/ck" --resume
grep -qi "disagree" "$TMP/truncated.err" && fail "a truncated checkpoint is reported as a disagreement of ranks"
has truncated.err "__0_0.distcp"

# issue 29: a checkpoint of non-finite weights (a diverged run: lr 1e38) is refused, naming the
# folder and the tensor; --allow-nonfinite-checkpoint resumes it with a warning
run diverge 0 "$TRAIN" --model mlp $Q --steps 3 --lr 1e38 --checkpoint-dir "$TMP/nan"
run nan_ckpt 1 "$TRAIN" --model mlp $Q --steps 4 --checkpoint-dir "$TMP/nan" --resume
has nan_ckpt.err "$TMP/nan/step-3: tensor model.fc1.weight holds"
has nan_ckpt.err "non-finite"
run nan_allowed 0 "$TRAIN" --model mlp $Q --steps 4 --checkpoint-dir "$TMP/nan" --resume --allow-nonfinite-checkpoint
has nan_allowed.err "WARNING"
has nan_allowed.err "fc1.weight"

# 8. a save killed before its .metadata (a step folder without one) is not taken for a checkpoint:
# the newest complete one is resumed
rm -rf "$TMP/ck/step-2" && cp -r "$TMP/good" "$TMP/ck/step-2"
mkdir -p "$TMP/ck/step-99" && cp "$TMP/good/__0_0.distcp" "$TMP/ck/step-99/"
run resume_ok 0 "$TRAIN" --model mlp --data "$TMP/small" --train-samples 96 --batch-size 16 --no-eval --steps 4 \
    --checkpoint-dir "$TMP/ck" --resume
has resume_ok.out "resumed from $TMP/ck/step-2: epoch 1, step 2"
[ -s "$TMP/ck/step-4/.metadata" ] || fail "the resumed run wrote no step-4 checkpoint"

# issue 23: under srun without --mpi (Slurm's variables, no WORLD_SIZE) the tasks train as one group
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
slurm() { # RANK ARGS...: one task of a 2-task Slurm step on this host
    _r=$1
    shift
    env -u WORLD_SIZE -u RANK SLURM_PROCID=$_r SLURM_NTASKS=2 SLURM_LOCALID=$_r SLURM_NTASKS_PER_NODE=2 \
        SLURM_JOB_NODELIST=localhost SLURM_JOB_ID=4242 MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT \
        OMP_NUM_THREADS=1 "$TRAIN" "$@"
}
SECRET_A=slurm-test-secret-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa SECRET_B=slurm-test-secret-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb
PORT=$(free_port)
SPMD_AUTH_TOKEN=$SECRET_A SPMD_TIMEOUT=120 slurm 1 --model mlp $Q --steps 2 >"$TMP/srun1.out" 2>"$TMP/srun1.err" &
SRUN1=$!
SPMD_AUTH_TOKEN=$SECRET_A SPMD_TIMEOUT=120 slurm 0 --model mlp --data $TMP/small --train-samples 96 \
    --batch-size 16 --no-eval --steps 2 >"$TMP/srun0.out" 2>"$TMP/srun0.err" || fail "srun rank 0 failed"
wait $SRUN1 || fail "srun rank 1 failed"
has srun0.out "world 2"
grep -q "world 1" "$TMP/srun0.out" && fail "srun tasks trained alone"
# joining fails on rank 1 (another job's secret): its own rank and the real cause, not "protocol violation"
PORT=$(free_port)
SPMD_AUTH_TOKEN=$SECRET_A SPMD_TIMEOUT=10 slurm 0 --model mlp $Q --steps 2 >/dev/null 2>"$TMP/join0.err" &
JOIN0=$!
SPMD_AUTH_TOKEN=$SECRET_B SPMD_TIMEOUT=10 slurm 1 --model mlp $Q --steps 2 >/dev/null 2>"$TMP/join1.err"
wait $JOIN0
has join1.err "spmd-train: rank 1: cannot join the group"
grep -q "protocol violation" "$TMP/join1.err" && fail "a refused join is called a protocol violation"
# the same with torchrun's variables
PORT=$(free_port)
torchrun_env() { env RANK=$1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT SPMD_TIMEOUT=10 OMP_NUM_THREADS=1 SPMD_AUTH_TOKEN=$2 "$TRAIN" --model mlp $Q --steps 2; }
torchrun_env 0 "$SECRET_A" >/dev/null 2>"$TMP/tjoin0.err" &
JOIN0=$!
torchrun_env 1 "$SECRET_B" >/dev/null 2>"$TMP/tjoin1.err"
wait $JOIN0
has tjoin1.err "spmd-train: rank 1: cannot join the group"
grep -q "protocol violation" "$TMP/tjoin1.err" && fail "a refused join is called a protocol violation"

# 12. the progress line: on a terminal under spmdrun, with an ETA, never wider than the terminal
if command -v script >/dev/null 2>&1; then
    for cols in 80 50; do
        OMP_NUM_THREADS=1 script -qec "stty cols $cols; \"$SPMDRUN\" -n 2 --master-port 0 \"$TRAIN\" --model mlp --data $TMP/small --batch-size 8 --no-eval --log-every 2" \
            /dev/null >"$TMP/tty$cols.out" 2>&1 </dev/null || fail "progress run ($cols columns) failed"
        tr '\r' '\n' <"$TMP/tty$cols.out" | sed 's/\x1b\[K//g' | grep "ETA" >"$TMP/progress$cols"
        grep -q "^epoch 1/1.* loss .* ETA [0-9-]*:[0-9-]*" "$TMP/progress$cols" ||
            { fail "no progress line with an ETA under spmdrun on a terminal ($cols columns)"; cat "$TMP/tty$cols.out" >&2; }
        # every state of the line (between carriage returns) fits the terminal
        wide=$(awk -v c=$cols 'length($0) >= c' "$TMP/progress$cols" | head -1)
        [ -z "$wide" ] || fail "a progress line of ${#wide} columns on a $cols-column terminal: $wide"
    done
fi
[ "$FAILED" -eq 0 ] || exit 1
echo "PASS"
