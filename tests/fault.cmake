# Fault injection (tests/fault/): strangers on the store and mesh ports, killed
# ranks under spmdrun and spmd_spawn, orphans.  Small counts here; the long
# mode is bench/fault_trials.sh (docs/RELIABILITY.md).
spmd_test(test_fault_store SOURCES fault/test_fault_store.c LABELS fault store ARGS 500 TIMEOUT 120)
