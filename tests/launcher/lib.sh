# tests/launcher/lib.sh — helpers shared by the launcher test scripts (POSIX sh).
# Each script gets SPMDRUN and WORKER as $1 $2 and sources this file.

TMP=$(mktemp -d "${TMPDIR:-/tmp}/spmdrun-test.XXXXXX") || exit 1
FAILED=0

cleanup_tmp() { rm -rf "$TMP"; }
trap cleanup_tmp EXIT

fail() {
    echo "FAIL: $*" >&2
    FAILED=$((FAILED + 1))
}

# expect_line FILE LINE: FILE holds exactly this line.
expect_line() {
    grep -Fxq -- "$2" "$1" || fail "$1 lacks the line '$2'"
}

# expect_text FILE TEXT: FILE contains TEXT somewhere.
expect_text() {
    grep -Fq -- "$2" "$1" || fail "$1 lacks '$2'"
}

# expect_count FILE REGEX N: N lines of FILE match the basic regex.
expect_count() {
    _n=$(grep -c -- "$2" "$1")
    [ "$_n" -eq "$3" ] || fail "$1: $_n lines match '$2', expected $3"
}

# now_ms: monotonic enough for elapsed-time bounds.
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

# pids_of FILE: every pid from "pids <worker> <grandchild>" lines.
pids_of() { sed -n 's/.*pids \([0-9]*\) \([0-9]*\)$/\1 \2/p' "$1" | tr '\n' ' '; }

# show FILE...: print files for the log of a failing test.
show() {
    for _f in "$@"; do
        echo "----- $_f" >&2
        cat "$_f" >&2 2>/dev/null
    done
}

finish() {
    if [ "$FAILED" -ne 0 ]; then
        echo "$FAILED check(s) failed" >&2
        exit 1
    fi
    echo "ok"
    exit 0
}
