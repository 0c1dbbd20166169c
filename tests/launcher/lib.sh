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
    # Sanitizer builds: a report from spmdrun or a worker fails the test even
    # when the exit status looked right (a failing job exits 1 anyway).
    _san=$(grep -rlE 'Sanitizer|runtime error:' "$TMP" 2>/dev/null)
    if [ -n "$_san" ]; then
        fail "sanitizer report in: $_san"
        show $_san
    fi
    if [ "$FAILED" -ne 0 ]; then
        echo "$FAILED check(s) failed" >&2
        exit 1
    fi
    echo "ok"
    exit 0
}

# start_host NAME CMD...: start CMD (an spmdrun that hosts the rendezvous store)
# in the background with stdout in $TMP/NAME.out and stderr in $TMP/NAME.err;
# returns once it printed where the store listens: HOST_PID and HOST_PORT are
# set.  (Port 0 is asked for, so the real port is only known from that line.)
# Wait for it with wait_host.
start_host() {
    _name=$1
    shift
    mkfifo "$TMP/$_name.efifo"
    "$@" >"$TMP/$_name.out" 2>"$TMP/$_name.efifo" &
    HOST_PID=$!
    exec 4<"$TMP/$_name.efifo"
    HOST_PORT=
    : >"$TMP/$_name.err"
    while IFS= read -r _line <&4; do
        echo "$_line" >>"$TMP/$_name.err"
        case "$_line" in
        *"hosting the rendezvous store at "*)
            HOST_PORT=${_line##*:}
            HOST_PORT=${HOST_PORT%% *}
            break
            ;;
        esac
    done
    cat <&4 >>"$TMP/$_name.err" &
    HOST_DRAIN=$!
    exec 4<&-
}

# wait_host: wait for the host started by start_host and for the copy of its
# stderr; returns the host's exit status.
wait_host() {
    wait $HOST_PID
    _rc=$?
    wait $HOST_DRAIN
    return $_rc
}

# Reading a worker's output as it comes, without sleeping: the output goes to a
# fifo kept open on a descriptor (3..9); read_until copies lines to a file until
# enough of them match; drain copies the rest in the background at the end.
# open_fifo FD FIFO
open_fifo() { eval "exec $1<\"\$2\""; }
# read_until FD FILE N PATTERN
read_until() {
    touch "$2"
    while [ "$(grep -c -- "$4" "$2")" -lt "$3" ] && IFS= read -r _line <&"$1"; do
        echo "$_line" >>"$2"
    done
}
# drain FD FILE
drain() {
    cat <&"$1" >>"$2" &
    eval "exec $1<&-"
}
