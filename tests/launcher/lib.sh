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

# netns_pair TAG ADDR0 ADDR1: two network namespaces joined by a veth pair,
# NS0/NS1 (named spmd<TAG><pid>a/b), V0/V1 their ends with ADDR0/ADDR1 (/24),
# loopback up, the veth ends left down.  Namespaces of an earlier run that was
# SIGKILLed (named after a dead pid) are removed first; these are removed on
# exit.  Exits 77 (skip) where namespaces or veth pairs are not permitted.
netns_pair() {
    command -v ip >/dev/null 2>&1 || { echo "SKIP: no 'ip' command (iproute2)"; exit 77; }
    for _ns in $(ip netns list 2>/dev/null | sed -n "s/^\(spmd$1[0-9]*\)[ab].*/\1/p" | sort -u); do
        kill -0 "${_ns#spmd$1}" 2>/dev/null || { ip netns del "${_ns}a"; ip netns del "${_ns}b"; } 2>/dev/null
    done
    NS0=spmd$1$$a NS1=spmd$1$$b V0=sp$1$$a V1=sp$1$$b
    trap netns_cleanup EXIT
    trap 'exit 1' INT TERM HUP
    if ! ip netns add "$NS0" 2>"$TMP/ip.err"; then
        echo "SKIP: 'ip netns add' is not permitted here: $(cat "$TMP/ip.err")"
        exit 77
    fi
    ip netns add "$NS1" || exit 1
    if ! ip link add "$V0" type veth peer name "$V1" 2>"$TMP/ip.err"; then
        echo "SKIP: cannot create a veth pair: $(cat "$TMP/ip.err")"
        exit 77
    fi
    ip link set "$V0" netns "$NS0" && ip link set "$V1" netns "$NS1" &&
        ip -n "$NS0" addr add "$2/24" dev "$V0" && ip -n "$NS1" addr add "$3/24" dev "$V1" &&
        ip -n "$NS0" link set lo up && ip -n "$NS1" link set lo up || { fail "namespace setup"; finish; }
}
netns_cleanup() {
    ip netns del "$NS0" 2>/dev/null # deleting a namespace also deletes its veth end and the peer
    ip netns del "$NS1" 2>/dev/null
    ip link del "$V0" 2>/dev/null
    rm -rf "$TMP"
}
