spmd_test(test_p2p SOURCES mp/test_p2p.c LABELS mp TIMEOUT 300)
