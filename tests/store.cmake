# Store tests: codec, operations, blocking, concurrency, garbage clients, fork.
spmd_test(test_store_wire SOURCES unit/test_store_wire.c LABELS unit store TIMEOUT 60)
spmd_test(test_store_ops SOURCES unit/test_store_ops.c LABELS unit store TIMEOUT 60)
spmd_test(test_store_block SOURCES unit/test_store_block.c LABELS unit store TIMEOUT 60)
spmd_test(test_store_threads SOURCES unit/test_store_threads.c LABELS unit store TIMEOUT 120)
spmd_test(test_store_garbage SOURCES unit/test_store_garbage.c LABELS unit store TIMEOUT 60)
spmd_test(test_store_fork SOURCES mp/test_store_fork.c LABELS mp store TIMEOUT 60)
spmd_test(test_store_latency SOURCES unit/test_store_latency.c LABELS unit store ARGS 200 TIMEOUT 60)
spmd_test(test_store_reply_limit SOURCES mp/test_store_reply_limit.c LABELS mp store TIMEOUT 600)
# It measures the store process's resident memory: under ASan, freed buffers
# would stay resident in the allocator's quarantine and be counted.
set_tests_properties(test_store_reply_limit PROPERTIES
  ENVIRONMENT "ASAN_OPTIONS=quarantine_size_mb=0:detect_leaks=1:abort_on_error=0")
