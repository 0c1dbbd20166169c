#!/bin/sh
# spmd-train as a new user meets it (issue 12): data sets whose images do not
# fit the model are refused before the first step (7); a state_dict or a
# checkpoint of another model is refused naming the tensor or the model (7);
# corrupt or nonsensical checkpoints are explained at world 1, and a resume
# clears the temporaries of killed saves (8); --plot into a missing folder
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
run resume_wrong 1 "$TRAIN" --model cnn $Q --steps 4 --checkpoint-dir "$TMP/ck" --resume
has resume_wrong.err "holds a mlp model; this run trains cnn"

# 8. corrupt checkpoints at world 1: what is wrong with the file, not "ranks disagree"
cp "$TMP/ck/checkpoint.safetensors" "$TMP/good.safetensors"
patch_state() { # FIELD VALUE: set trainer.state[FIELD] in the checkpoint
    python3 - "$TMP/ck/checkpoint.safetensors" "$1" "$2" <<'PY'
import json, struct, sys
path, field, value = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
b = bytearray(open(path, "rb").read())
n = struct.unpack("<Q", b[:8])[0]
hdr = json.loads(b[8:8 + n])
start = 8 + n + hdr["trainer.state"]["data_offsets"][0] + 8 * field
b[start:start + 8] = struct.pack("<q", value)
open(path, "wb").write(b)
PY
}
i=0
for case in "0 -9223372036854775808" "0 -1" "1 -5" "2 -1" "1 1000" "3 99" "4 3"; do
    cp "$TMP/good.safetensors" "$TMP/ck/checkpoint.safetensors"
    patch_state $case
    i=$((i + 1))
    run "state$i" 1 "$TRAIN" --model mlp $Q --steps 4 --checkpoint-dir "$TMP/ck" --resume
    has "state$i.err" "trainer.state is not a position this run can continue from"
    grep -qi "disagree" "$TMP/state$i.err" && fail "state$i: reported as a disagreement of ranks"
done
head -c 100 "$TMP/good.safetensors" >"$TMP/ck/checkpoint.safetensors"
run truncated 1 "$TRAIN" --model mlp $Q --steps 4 --checkpoint-dir "$TMP/ck" --resume
grep -qi "disagree" "$TMP/truncated.err" && fail "a truncated checkpoint is reported as a disagreement of ranks"
has truncated.err "checkpoint.safetensors"

# 8. the temporaries of killed saves go at the next resume; a live writer's stay
cp "$TMP/good.safetensors" "$TMP/ck/checkpoint.safetensors"
sh -c 'exit 0' & DEAD=$!
wait $DEAD
HOST=$(hostname)
: >"$TMP/ck/.checkpoint.safetensors.tmp-$HOST-$DEAD-abcdef"
: >"$TMP/ck/.checkpoint.safetensors.tmp-$HOST-1-abcdef"
run resume_ok 0 "$TRAIN" --model mlp $Q --steps 4 --checkpoint-dir "$TMP/ck" --resume
[ -e "$TMP/ck/.checkpoint.safetensors.tmp-$HOST-$DEAD-abcdef" ] && fail "a dead writer's temporary survived the resume"
[ -e "$TMP/ck/.checkpoint.safetensors.tmp-$HOST-1-abcdef" ] || fail "a live writer's temporary was removed"

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
