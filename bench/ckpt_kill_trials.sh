#!/bin/sh
# 70 SIGKILLs at random points of a world-2 sharded save (issue 26): the
# previous checkpoint must load every time, the killed one must never load
# half, the next save must clean up.  Usage: bench/ckpt_kill_trials.sh [BUILD_DIR] [SEED]
set -eu
build=${1:-build}
exec "$build/tests/test_ckpt_kill" 70 "${2:-$(date +%s)}"
