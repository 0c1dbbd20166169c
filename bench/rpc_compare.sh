#!/bin/sh
# spmd's RPC and torch's in the same run: sh bench/rpc_compare.sh BUILD_DIR [iters]
set -e
build=${1:-build}
iters=${2:-500}
# Debian's torch lives in the system python (a pyenv python3 may shadow it).
PY=${SPMD_PYTHON:-/usr/bin/python3}
echo "# $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg)"
"$build/tools/spmd-bench" -o rpc -n "$iters"
if "$PY" -c 'import torch' 2>/dev/null; then
    "$PY" "$(dirname "$0")/rpc_torch.py" "$((iters / 2))"
else
    echo "# (python3-torch not installed: torch RPC skipped)"
fi
