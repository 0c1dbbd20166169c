spmd_test(test_common SOURCES unit/test_common.c LABELS unit)
spmd_test(test_env_watch SOURCES unit/test_env_watch.c LABELS unit TIMEOUT 60)
spmd_test(test_env_numeric SOURCES unit/test_env_numeric.c LABELS unit TIMEOUT 60)
