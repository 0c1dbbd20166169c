# A message split across the end of a shared-memory ring wakes its receiver.
spmd_test(test_p2p_split SOURCES mp/test_p2p_split.c LABELS mp TIMEOUT 120)
