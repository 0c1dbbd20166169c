# The transport's shared-memory point-to-point rules (waking, single copy).
spmd_test(test_p2p_shm SOURCES mp/test_p2p_shm.c LABELS mp TIMEOUT 180)
# Large point-to-point messages through the rings (no cross-memory attach).
add_test(NAME test_p2p_nocma COMMAND test_p2p 2)
set_tests_properties(test_p2p_nocma PROPERTIES TIMEOUT 120 LABELS "mp" ENVIRONMENT "SPMD_CMA=0")
# SPMD_BIND=core pins the ranks of a host to cores of their own.
spmd_test(test_bind SOURCES mp/test_bind.c LABELS mp TIMEOUT 120)
