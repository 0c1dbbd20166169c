#!/bin/sh
# orphans.sh SPMDRUN WORKER — no descendant outlives spmdrun: workers start a
# grandchild in its own session (setsid), then (1) exit normally, or (2) hang
# while spmdrun is SIGKILLed.  Every grandchild must be gone afterwards.
set -u
SPMDRUN=$1 WORKER=$2
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0

# Wait (bounded) until every pid listed in $tmp/*.pid is gone.
all_gone() {
    i=0
    while [ $i -lt 200 ]; do
        alive=0
        for f in "$tmp"/*.pid; do
            [ -f "$f" ] || continue
            p=$(cat "$f")
            # a zombie awaiting its reaper counts as gone
            if [ -d "/proc/$p" ] && ! grep -q '^State:.*Z' "/proc/$p/status" 2>/dev/null; then alive=1; fi
        done
        [ $alive -eq 0 ] && return 0
        sleep 0.05
        i=$((i + 1))
    done
    return 1
}

# 1. normal exit
FAULT_MODE=orphan FAULT_DIR=$tmp "$SPMDRUN" --standalone --nproc-per-node=3 "$WORKER" || fail=1
n=$(ls "$tmp"/*.pid 2>/dev/null | wc -l)
[ "$n" -eq 3 ] || { echo "expected 3 grandchildren, got $n"; fail=1; }
all_gone || { echo "FAIL: a setsid grandchild outlived a normal spmdrun exit"; fail=1; }
rm -f "$tmp"/*.pid

# 2. spmdrun SIGKILLed while the workers hang
FAULT_MODE=orphan FAULT_HANG=1 FAULT_DIR=$tmp "$SPMDRUN" --standalone --nproc-per-node=3 "$WORKER" &
agent=$!
i=0
while [ "$(ls "$tmp"/*.pid 2>/dev/null | wc -l)" -lt 3 ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
[ "$(ls "$tmp"/*.pid 2>/dev/null | wc -l)" -eq 3 ] || { echo "workers did not start"; fail=1; }
kill -KILL $agent
wait $agent 2>/dev/null
all_gone || { echo "FAIL: a setsid grandchild outlived a SIGKILLed spmdrun"; fail=1; }
for f in "$tmp"/*.pid; do [ -f "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null; done
[ $fail -eq 0 ] && echo "orphans: none left (normal exit, SIGKILL of spmdrun)"
exit $fail
