spmd_test(test_p2p SOURCES mp/test_p2p.c LABELS mp TIMEOUT 300)
spmd_test(test_failure SOURCES mp/test_failure.c LABELS mp TIMEOUT 120)
