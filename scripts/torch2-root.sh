#!/bin/sh
# A Debian 13 (trixie) root with torch 2.6, for building and testing
# spmd_torch against torch 2.x on a Debian 12 host (make check-torch2).
#
#   scripts/torch2-root.sh ensure            make the root, or reuse it
#   scripts/torch2-root.sh run [-b DIR]... [--] CMD [ARG]...
#                                            run CMD inside the root (made
#                                            first when missing), with DIR
#                                            (default: this source tree)
#                                            bound at the same path;
#                                            compilers go through ccache
#                                            (cache: $SPMD_TORCH2_CCACHE)
#   scripts/torch2-root.sh path              print the root's location
#
# The root is made once with `debootstrap trixie` from Debian's archive and
# the packages below installed with apt inside it; it is complete when
# $ROOT/.spmd-ready exists (other tools wait for that marker).  Later calls
# reuse it, installing only packages added to the list since.
#
# Every run happens in a private mount namespace (unshare -m): /proc, /sys,
# /dev, a fresh /dev/shm and /tmp and the bound source tree exist only for
# the run and vanish with it, even when it is killed (SIGKILL included) —
# no mount is ever left behind on the host.  A lock next to the root keeps
# concurrent calls from corrupting it: making or updating the root holds it
# exclusively, runs hold it shared.
#
# Environment: SPMD_TORCH2_ROOT (default /var/cache/spmd/trixie-torch),
# SPMD_TORCH2_CCACHE (default $SPMD_TORCH2_ROOT-ccache),
# SPMD_DEBIAN_MIRROR (default http://deb.debian.org/debian).  Needs root,
# debootstrap, unshare and flock (util-linux).
set -eu

ROOT=${SPMD_TORCH2_ROOT:-/var/cache/spmd/trixie-torch}
MIRROR=${SPMD_DEBIAN_MIRROR:-http://deb.debian.org/debian}
SUITE=trixie
LOCK="$ROOT.lock"
SRC=$(cd "$(dirname "$0")/.." && pwd)

# What the root holds: the build tools, the libraries libspmd links, Debian
# 13's torch (2.6) with its C++ headers, Python's headers and pybind11 for
# spmd_torch, pip and setuptools for the pip-path test, Open MPI for the MPI
# backend and its link flags.
PKGS="build-essential cmake make pkg-config libssl-dev libopenblas-dev zlib1g-dev \
python3 python3-dev python3-torch python3-numpy libtorch-dev pybind11-dev \
python3-pip python3-setuptools libopenmpi-dev openmpi-bin procps iproute2 ca-certificates ccache"
# Runs compile through the root's ccache, its cache next to the root (bound
# in): CI keeps /var/cache/spmd, so a rebuild of unchanged sources is a hit.
CCACHE=${SPMD_TORCH2_CCACHE:-$ROOT-ccache}

die() { echo "torch2-root: $*" >&2; exit 1; }

need_tools() {
    [ "$(id -u)" = 0 ] || die "must run as root (debootstrap, chroot and mounts need it)"
    for t in unshare flock chroot mount; do
        command -v "$t" >/dev/null 2>&1 || die "$t not found (Debian: apt-get install util-linux mount coreutils)"
    done
}

# The packages the root lacks (empty when complete).
missing_pkgs() {
    for p in $PKGS; do
        chroot "$ROOT" dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
            || printf ' %s' "$p"
    done
}

# Mount what a run needs under $1 (a root), inside the caller's private mount
# namespace: the mounts die with it.
mount_run() {
    r=$1; shift
    mount -t proc proc "$r/proc"
    mount --rbind /sys "$r/sys"
    mount --rbind /dev "$r/dev"
    mount -t tmpfs -o mode=1777,nosuid,nodev shm "$r/dev/shm"
    mount -t tmpfs -o mode=1777,nosuid,nodev tmp "$r/tmp"
    for d in "$@"; do
        mkdir -p "$r$d"
        mount --bind "$d" "$r$d"
    done
}

# Runs in the private namespace (re-entered through unshare): the work of one
# call.  Its first argument says which.
inner() {
    what=$1; shift
    # Nothing mounted here may reach the host's namespace.
    mount --make-rprivate /
    case "$what" in
    bootstrap)
        part="$ROOT.partial"
        # An interrupted debootstrap left only files (its mounts died with
        # its namespace): start over.
        rm -rf --one-file-system "$part"
        debootstrap --variant=minbase "$SUITE" "$part" "$MIRROR"
        mv "$part" "$ROOT"
        ;;
    install)
        mount_run "$ROOT"
        cat >"$ROOT/etc/apt/sources.list" <<EOF
deb $MIRROR $SUITE main
deb $MIRROR $SUITE-updates main
deb http://security.debian.org/debian-security $SUITE-security main
EOF
        cp /etc/resolv.conf "$ROOT/etc/resolv.conf" 2>/dev/null || true
        chroot "$ROOT" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
            apt-get update -qq
        # shellcheck disable=SC2086
        chroot "$ROOT" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
            apt-get install -y -qq --no-install-recommends $1
        chroot "$ROOT" apt-get clean
        ;;
    check)
        # torch imports (with /proc mounted: its cpuinfo and UCX read it);
        # the marker appears whole (rename), holding torch's version.
        mount_run "$ROOT"
        chroot "$ROOT" python3 -c 'import torch; print(torch.__version__)' >"$ROOT/.spmd-ready.tmp" \
            || die "torch does not import in $ROOT"
        mv "$ROOT/.spmd-ready.tmp" "$ROOT/.spmd-ready"
        ;;
    run)
        ndirs=$1; shift
        dirs=""
        i=0
        while [ "$i" -lt "$ndirs" ]; do dirs="$dirs $1"; shift; i=$((i + 1)); done
        # shellcheck disable=SC2086
        mount_run "$ROOT" $dirs "$CCACHE"
        cwd=/
        for d in $dirs; do
            case "$PWD/" in "$d"/*) cwd=$PWD ;; esac
        done
        # A clean environment: the host's PATH, PYTHONPATH or MAKEFLAGS mean
        # nothing in the root; SPMD_* settings (the transport, ...) pass on.
        set -- env -i HOME=/root PATH=/usr/lib/ccache:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
            CCACHE_DIR="$CCACHE" LANG=C.UTF-8 TERM="${TERM:-dumb}" $(env | sed -n 's/^\(SPMD_[A-Za-z0-9_]*=[^ ]*\)$/\1/p') \
            sh -c 'cd "$0" && exec "$@"' "$cwd" "$@"
        exec chroot "$ROOT" "$@"
        ;;
    esac
}

# The root's /etc/hosts: localhost, and this host's name (programs that
# publish their host name, as torch's tcp:// rendezvous does, must resolve
# it inside the root too).
hosts() {
    printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n'
    h=$(hostname)
    [ -z "$h" ] || [ "$h" = localhost ] || printf '127.0.1.1\t%s\n' "$h"
}

# Make the root, or bring it up to date; holds the lock exclusively.
ensure() {
    if [ -e "$ROOT/.spmd-ready" ] && [ -z "$(missing_pkgs)" ]; then
        [ "$(hosts)" = "$(cat "$ROOT/etc/hosts" 2>/dev/null)" ] || hosts >"$ROOT/etc/hosts"
        return 0
    fi
    command -v debootstrap >/dev/null 2>&1 \
        || die "debootstrap not found (Debian: apt-get install debootstrap)"
    if [ ! -x "$ROOT/usr/bin/apt-get" ]; then
        [ ! -e "$ROOT" ] || die "$ROOT exists but is no Debian root; remove it or set SPMD_TORCH2_ROOT"
        echo "torch2-root: debootstrap $SUITE into $ROOT (from $MIRROR)" >&2
        unshare --mount --propagation private "$0" __inner bootstrap
    fi
    miss=$(missing_pkgs)
    if [ -n "$miss" ]; then
        echo "torch2-root: installing$miss" >&2
        unshare --mount --propagation private "$0" __inner install "$miss"
    fi
    [ -z "$(missing_pkgs)" ] || die "packages still missing in $ROOT:$(missing_pkgs)"
    hosts >"$ROOT/etc/hosts"
    unshare --mount --propagation private "$0" __inner check
    echo "torch2-root: $ROOT ready (torch $(cat "$ROOT/.spmd-ready"))" >&2
}

if [ "${1:-}" = __inner ]; then
    shift
    inner "$@"
    exit $?
fi

cmd=${1:-}
[ -n "$cmd" ] || die "usage: $0 ensure | run [-b DIR]... [--] CMD [ARG]... | path"
shift
case "$cmd" in
path)
    echo "$ROOT"
    ;;
ensure)
    need_tools
    mkdir -p "$(dirname "$ROOT")"
    exec 9>"$LOCK"
    flock -x 9
    ensure
    ;;
run)
    need_tools
    dirs=""
    n=0
    while [ $# -gt 0 ]; do
        case "$1" in
        -b) [ $# -ge 2 ] || die "-b needs a directory"
            d=$(cd "$2" && pwd) || die "-b $2: no such directory"
            dirs="$dirs $d"; n=$((n + 1)); shift 2 ;;
        --) shift; break ;;
        *) break ;;
        esac
    done
    [ $# -gt 0 ] || die "run: no command given"
    if [ "$n" = 0 ]; then dirs=$SRC; n=1; fi
    mkdir -p "$(dirname "$ROOT")" "$CCACHE"
    exec 9>"$LOCK"
    flock -x 9
    ensure
    # Runs share the root; only making or updating it is exclusive.
    flock -s 9
    # shellcheck disable=SC2086
    unshare --mount --propagation private "$0" __inner run "$n" $dirs "$@" 9>&-
    ;;
*)
    die "unknown command '$cmd' (ensure, run or path)"
    ;;
esac
