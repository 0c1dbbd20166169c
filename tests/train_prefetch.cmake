# The prefetching batch iterator (src/data/prefetch.c): the same batches as
# without it, errors and early stops (run under ASan and TSan too).
spmd_test(test_prefetch SOURCES train/test_prefetch.c LIBS spmdnn LABELS unit nn train TIMEOUT 60)
