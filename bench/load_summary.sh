#!/bin/sh
# The one-page summary of bench/compare_load.sh's output: for each world and
# background load, the range of peer time / spmd time over the sizes, per
# peer and against the best of them at each size (issue 28's loaded goal),
# for all_reduce and ping-pong, small (up to 64 KiB) and large sizes apart.
# Above 1, spmd is faster.
#   bench/load_summary.sh OUTDIR      (OUTDIR/w<world>-load<N>.txt)
set -u
DIR=${1:?usage: bench/load_summary.sh OUTDIR}
echo "| world | busy processes | benchmark | sizes | vs vader | vs MPICH 4 | vs Open MPI 5 | vs the best |"
echo "|---:|---:|---|---|---|---|---|---|"
for f in "$DIR"/w*-load*.txt; do
    [ -e "$f" ] || continue
    b=$(basename "$f" .txt)
    w=${b#w}; w=${w%%-*}
    n=${b##*load}
    awk -v w="$w" -v n="$n" '
        function show(bench, lo, hi,   k, s, p) {
            s = ""
            for (k = 1; k <= 4; k++) {
                p = want[k]
                if (cnt[bench, lo, p]) s = s sprintf(" %.2f–%.2f |", mn[bench, lo, p], mx[bench, lo, p])
                else s = s " – |"
            }
            if (any[bench, lo]) printf "| %s | %s | %s | %s |%s\n", w, n, bench, hi, s
        }
        BEGIN { want[1] = "shm"; want[2] = "mpich"; want[3] = "ompi5"; want[4] = "best" }
        function note(key, v) {
            if (!cnt[key] || v < mn[key]) mn[key] = v
            if (!cnt[key] || v > mx[key]) mx[key] = v
            cnt[key]++
        }
        /^# all_reduce/ { bench = "all_reduce" }
        /^# ping-pong/  { bench = "ping-pong" }
        $1 == "bytes" {
            nr = 0
            for (i = 2; i <= NF; i++) if ($i == "vs") names[++nr] = $(i + 1)
            next
        }
        /^ *[0-9]+ / && bench != "" && nr > 0 {
            lo = ($1 <= 65536) ? "small" : "large"
            best = -1
            for (k = 1; k <= nr; k++) {
                v = $(NF - nr + k); sub(/x$/, "", v); v += 0
                note(bench SUBSEP lo SUBSEP names[k], v)
                if (names[k] != "tcp" && names[k] != "gloo" && (best < 0 || v < best)) best = v
                any[bench, lo] = 1
            }
            if (best >= 0) note(bench SUBSEP lo SUBSEP "best", best)
        }
        END {
            show("all_reduce", "small", "4 B–64 KiB"); show("all_reduce", "large", "128 KiB and up")
            show("ping-pong", "small", "4 B–64 KiB");  show("ping-pong", "large", "256 KiB and up")
        }' "$f"
done | sort -t'|' -k2,2n -k3,3n -s
