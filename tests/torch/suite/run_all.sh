#!/bin/sh
# torch's distributed suite with gloo and spmd at world 2 and 3 on this
# machine's torch, then compared (compare.py):
#   run_all.sh BUILD_DIR OUT_DIR [dist_suite.py ARGS...]
# gloo and spmd of one world size run side by side (each test rendezvous
# through its own temporary file).  Exit code 1 when a test passes on gloo
# but not on spmd.  With --start fork (as make torch-suite passes) both worlds
# take about 5 min on the 2-core machine; with spawn (upstream's) ~10 s a test.
set -u
build=$(cd "$1" && pwd); out=$2; shift 2
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
st=0
for w in 2 3; do
    for b in gloo spmd; do
        BACKEND=$b WORLD_SIZE=$w PYTHONPATH="$build/python" /usr/bin/python3 \
            "$here/dist_suite.py" --out "$out/$b-$w.json" "$@" >"$out/$b-$w.log" 2>&1 &
    done
    wait
    tail -q -n 1 "$out/gloo-$w.log" "$out/spmd-$w.log"
    python3 "$here/compare.py" "$out/gloo-$w.json" "$out/spmd-$w.json" || st=1
done
exit $st
