spmd_test(test_ddp SOURCES mp/test_ddp.c LABELS mp TIMEOUT 300)
