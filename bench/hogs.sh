# hogs.sh — controlled background load for benchmarks and stress loops
# (sourced: `. bench/hogs.sh`).
#
#   hogs_traps                   once, in the main shell: end the hogs (and
#                                run $HOGS_CLEANUP) on EXIT, INT, TERM, HUP
#   hogs_start N [MAX_SECONDS]   start N CPU-bound processes (busy loops)
#   hogs_stop                    end them
#   hogs_beside N CMD...         run CMD beside N fresh hogs, end them, and
#                                return CMD's status (one configuration of a
#                                comparison: every peer gets its own hogs)
#
# Every hog is bounded three ways, so none outlives the run that started it:
# `timeout` kills it after MAX_SECONDS (default 3600); it stops by itself once
# the script that sourced this file is gone (it looks every 200000 steps, a
# fraction of a second, so a script killed with SIGKILL leaves nothing behind
# for long); and hogs_traps' trap ends them on any exit of the script.  Call
# hogs_start in the main shell, not in a pipeline or ( ): a subshell's hogs
# are not the trap's to stop (they still end with the script).
# HOGS_NICE=N starts them under `nice -n N` (default 0: they compete as
# equals with what is measured).
#
# The hogs are started the same way for every peer of a comparison: a plain
# busy loop of the shell, one process each, unpinned (the scheduler places
# them, as it would a user's other jobs).
HOGS_PIDS=""

hogs_start() {
    _n=${1:-0}
    _max=${2:-3600}
    [ "$_n" -gt 0 ] 2>/dev/null || return 0
    _parent=$$
    _i=0
    while [ "$_i" -lt "$_n" ]; do
        # The loop body is a counter, so the hog never sleeps; `kill -0`
        # every 200000 steps ends it once the parent is gone.
        nice -n "${HOGS_NICE:-0}" timeout -s KILL "$_max" sh -c '
            p=$1
            while kill -0 "$p" 2>/dev/null; do
                i=0
                while [ $i -lt 200000 ]; do i=$((i + 1)); done
            done' hog "$_parent" &
        HOGS_PIDS="$HOGS_PIDS $!"
        _i=$((_i + 1))
    done
}

hogs_traps() {
    trap 'hogs_stop; eval "${HOGS_CLEANUP:-}"' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    trap 'exit 129' HUP
}

hogs_stop() {
    [ -n "$HOGS_PIDS" ] || return 0
    # $! is `nice` exec'ing `timeout`: killing timeout with TERM makes it
    # pass the signal to its child, and KILL afterwards leaves no orphan.
    for _p in $HOGS_PIDS; do kill "$_p" 2>/dev/null; done
    for _p in $HOGS_PIDS; do wait "$_p" 2>/dev/null; done
    HOGS_PIDS=""
}

hogs_beside() {
    _hn=$1
    shift
    hogs_start "$_hn" 3600
    "$@"
    _hrc=$?
    hogs_stop
    return $_hrc
}
