#!/bin/sh
# fault_trials.sh [BUILD] [TRIALS] — the long mode of tests/fault/ (the suite
# runs a few trials of each; docs/RELIABILITY.md records this script's counts):
#   - TRIALS SIGKILLs of a random rank at a random iteration under spmdrun
#     (worlds 2..8, 4 B and 4 MiB all_reduce): the report names the killed rank
#   - TRIALS the same under spmd_spawn
#   - strangers on the store: no secret, wrong secret, garbage, truncated
#     handshakes, 500 simultaneous connections, the store's limits
#   - strangers on every listening rank's port during mesh formation (500 silent)
#   - orphans: setsid'd grandchildren after a normal exit and after SIGKILL of
#     spmdrun, 20 rounds
#   - TRIALS SIGSTOPs of a random rank under spmdrun (worlds 2..8): the report
#     names the stopped rank; TRIALS/4 rounds of frozen ranks without a
#     launcher (every survivor names it); TRIALS/10 rounds of dropped links in
#     network namespaces (when permitted)
# then the connection set-up time with and without authentication, and
# torch's TCPStore connect time in the same run when python3-torch is there.
set -u
B=${1:-build}
N=${2:-100}
T=$(cd "$(dirname "$0")/.." && pwd)/tests/fault
fail=0
echo "== kill trials under spmdrun ($N)"
sh "$T/kill_trials.sh" "$B/tools/spmdrun" "$B/tests/fault_worker" "$N" 8 | tail -1 || fail=1
echo "== kill trials under spmd_spawn ($N)"
"$B/tests/test_fault_spawn" "$N" 8 | tail -1 || fail=1
echo "== strangers on the store (500 connections)"
"$B/tests/test_fault_store" 500 && echo "store: every stranger refused, the job unaffected" || fail=1
echo "== strangers on the ranks' ports (500 silent connections per port)"
"$B/tests/test_fault_mesh" 500 && echo "mesh: formed with the real peers only" || fail=1
echo "== orphans (20 rounds)"
ok=0
i=0
while [ $i -lt 20 ]; do
    sh "$T/orphans.sh" "$B/tools/spmdrun" "$B/tests/fault_worker" >/dev/null && ok=$((ok + 1))
    i=$((i + 1))
done
echo "orphans: $ok of 20 rounds left nothing behind"
[ $ok -eq 20 ] || fail=1
echo "== SIGSTOP trials under spmdrun ($N)"
sh "$T/stop_trials.sh" "$B/tools/spmdrun" "$B/tests/fault_worker" "$N" 8 | tail -1 || fail=1
echo "== frozen ranks without a launcher ($((N / 4)) rounds)"
"$B/tests/test_heartbeat" $((N / 4)) | tail -1 || fail=1
echo "== dropped links ($((N / 10)) rounds of worlds 2 and 4, shm+tcp and tcp)"
sh "$T/linkdrop.sh" "$B/tests/fault_worker" $((N / 10 > 0 ? N / 10 : 1)) >"${TMPDIR:-/tmp}/linkdrop.$$" 2>&1
rc=$?
grep -v '^ok$' "${TMPDIR:-/tmp}/linkdrop.$$"
rm -f "${TMPDIR:-/tmp}/linkdrop.$$"
[ $rc -eq 0 ] || [ $rc -eq 77 ] || fail=1
echo "== connection set-up time"
"$B/bench/auth_setup" 2000 20 4
PY3=/usr/bin/python3
if $PY3 -c 'import torch.distributed' 2>/dev/null; then
$PY3 - <<'PY'
import time, statistics, datetime
from torch.distributed import TCPStore
srv = TCPStore("127.0.0.1", 0, 1, True, timeout=datetime.timedelta(seconds=30))
t = []
for _ in range(2000):
    t0 = time.perf_counter()
    c = TCPStore("127.0.0.1", srv.port, 1, False, timeout=datetime.timedelta(seconds=30))
    t.append((time.perf_counter() - t0) * 1e6)
    del c
print("torch TCPStore client connect (median of 2000, no authentication): %.1f us" % statistics.median(t))
PY
fi
exit $fail
