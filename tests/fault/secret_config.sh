#!/bin/sh
# secret_config.sh SPMDRUN WORKER — where the job secret comes from, and the
# clear refusals: a short token, a file others can read, several nodes whose
# per-user secret file others can read; a mode-600 file and SPMD_AUTH=off (loudly) work.
set -u
SPMDRUN=$1 WORKER=$2
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
expect() { # WANT-RC WANT-TEXT ENV... -- spmdrun args
    want_rc=$1 want_text=$2
    shift 2
    env "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ "$rc" -ne "$want_rc" ] || ! grep -q -- "$want_text" "$tmp/err"; then
        echo "FAIL: $* -> rc $rc (want $want_rc), stderr lacks '$want_text':"; cat "$tmp/err"
        fail=1
    fi
}
run="$SPMDRUN --standalone --nproc-per-node=2 $WORKER"
expect 2 "needs 32..1024" SPMD_AUTH_TOKEN=short FAULT_ITERS=1 $run
echo "0123456789abcdef0123456789abcdef-file" >"$tmp/secret"
chmod 644 "$tmp/secret"
expect 2 "chmod 600" SPMD_AUTH_FILE="$tmp/secret" FAULT_ITERS=1 $run
chmod 600 "$tmp/secret"
expect 0 "OMP_NUM_THREADS" SPMD_AUTH_FILE="$tmp/secret" FAULT_ITERS=1 $run
expect 0 "NOT authenticated" SPMD_AUTH=off FAULT_ITERS=1 $run
# Several nodes without SPMD_AUTH_TOKEN/FILE share the per-user secret file:
# one that others can read stops spmdrun before anything starts.
mkdir -p "$tmp/cfg/spmd" && chmod 700 "$tmp/cfg" "$tmp/cfg/spmd"
echo "0123456789abcdef0123456789abcdef-user" >"$tmp/cfg/spmd/secret"
chmod 640 "$tmp/cfg/spmd/secret"
expect 2 "chmod 600 $tmp/cfg/spmd/secret" -u SPMD_AUTH_TOKEN -u SPMD_AUTH_FILE XDG_CONFIG_HOME="$tmp/cfg" \
    "$SPMDRUN" --nnodes 2 --node-rank 0 --nproc-per-node 1 --master-port 0 "$WORKER"
[ $fail -eq 0 ] && echo "secret_config: ok"
exit $fail
