# RPC (src/rpc): every API call at worlds 1-4, failures, malformed frames.
spmd_test(test_rpc SOURCES mp/test_rpc.c LABELS mp rpc TIMEOUT 180)
spmd_test(test_rpc_failure SOURCES mp/test_rpc_failure.c LABELS mp rpc TIMEOUT 120)
