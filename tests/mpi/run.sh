#!/bin/sh
# One program under Open MPI's mpirun with the MPI backend (tests/mpi.cmake):
#   run.sh <np> <shm|tcp> <program> [args...]
# shm: Open MPI's shared memory (vader); tcp: --mca btl tcp,self, as between
# hosts.  Skips (77) where mpirun is missing.  Sanitizer and test settings of
# the environment are passed on to the ranks (SPMD_MPI_PRELOAD as their
# LD_PRELOAD); MPIRUN_ARGS adds mpirun options (--enable-recovery for the
# failure tests).
command -v mpirun >/dev/null 2>&1 || { echo "SKIP: mpirun not installed"; exit 77; }
np=$1 btl=$2
shift 2
case $btl in
    shm) btls=vader,self ;;
    tcp) btls=tcp,self ;;   # on loopback only (below): other tests' network namespaces come and go
    *) echo "run.sh: btl must be shm or tcp" >&2; exit 2 ;;
esac
root=
[ "$(id -u)" = 0 ] && root=--allow-run-as-root
pass=
for v in ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS TSAN_OPTIONS SPMD_SEGMENT_BYTES SPMD_SHM_SLOT_BYTES SPMD_LOG_LEVEL; do
    eval "set_=\${$v+x}"
    [ -n "$set_" ] && pass="$pass -x $v"
done
# ASan builds: the ranks (not mpirun) preload tests/mpi/lsan_nodelete.c
[ -n "${SPMD_MPI_PRELOAD:-}" ] && pass="$pass -x LD_PRELOAD=$SPMD_MPI_PRELOAD"
# --bind-to none: several jobs share the cores (ctest -j); --oversubscribe:
# more ranks than cores
# shellcheck disable=SC2086
exec timeout 280 mpirun $root --oversubscribe --bind-to none ${MPIRUN_ARGS:-} -np "$np" --mca btl "$btls" \
    --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
    -x SPMD_BACKEND=mpi -x SPMD_TIMEOUT="${SPMD_TIMEOUT:-30}" $pass "$@"
