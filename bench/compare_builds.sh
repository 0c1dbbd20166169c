#!/bin/sh
# compare_builds.sh — small-message latency of two builds of spmd (say, main
# and a branch) in one run, rounds interleaved so both see the same load:
#
#   bench/compare_builds.sh OLD_BUILD NEW_BUILD [ROUNDS] [BYTES] [OPS] [WORLDS]
#       defaults: 7 rounds, 8 bytes, "broadcast reduce gather scatter all_reduce", "2 4"
#
# For every world size, transport (the default, and SPMD_TRANSPORT=tcp) and
# collective: spmd-bench's out-of-place time of each build, the median over
# rounds, and new / old.
set -eu
OLD=$1
NEW=$2
ROUNDS=${3:-7}
BYTES=${4:-8}
OPS=${5:-"broadcast reduce gather scatter all_reduce"}
WORLDS=${6:-"2 4"}
OUT=$(mktemp -d /tmp/compare_builds.XXXXXX)
trap 'rm -rf "$OUT"' EXIT INT TERM
echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(date -u +%Y-%m-%d)"
echo "# old: $OLD  new: $NEW  $ROUNDS rounds, $BYTES bytes; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
r=1
while [ "$r" -le "$ROUNDS" ]; do
    for w in $WORLDS; do
        for t in auto tcp; do
            for op in $OPS; do
                for b in old new; do
                    dir=$OLD
                    [ "$b" = new ] && dir=$NEW
                    SPMD_TRANSPORT=$t "$dir/tools/spmd-bench" --np "$w" -o "$op" -b "$BYTES" -e "$BYTES" -n 3000 -w 200 \
                        -c 0 --outplace-only 2> /dev/null | awk -v k="$w $t $op" '!/^#/ && NF {print k, $6}' >> "$OUT/$b"
                done
            done
        done
    done
    r=$((r + 1))
done
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
# "world|transport|collective median"
med() {
    sort -k4,4g "$1" | awk '{k=$1"|"$2"|"$3; v[k]=v[k]" "$4} END {for (k in v) {
        n = split(v[k], a, " "); print k, (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }}' | sort
}
med "$OUT/old" > "$OUT/old.med"
med "$OUT/new" > "$OUT/new.med"
printf '%6s %9s %14s %10s %10s %8s\n' world transport collective "old us" "new us" new/old
join "$OUT/old.med" "$OUT/new.med" | tr '|' ' ' |
    awk '{printf "%6d %9s %14s %10.2f %10.2f %8.2f\n", $1, $2, $3, $4, $5, $5 / $4}' | sort -k1,1n -k2,2 -k3,3
