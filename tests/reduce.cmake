# Reduce kernels, f16/bf16 conversions, dtype/op names (src/coll/reduce*, half.c, dtype.c).
spmd_test(test_reduce SOURCES unit/test_reduce.c LABELS unit TIMEOUT 60)
