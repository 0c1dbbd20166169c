spmd_test(test_common SOURCES unit/test_common.c LABELS unit)
