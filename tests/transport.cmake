# The transport's shared-memory point-to-point rules (waking, single copy).
spmd_test(test_p2p_shm SOURCES mp/test_p2p_shm.c LABELS mp TIMEOUT 180)
# ... with every wait sleeping at once and every byte through the rings: a
# lost wake-up shows as a 1 s stall per message (about 40 s here, so the
# timeout catches it; a run takes well under a second).
add_test(NAME test_p2p_shm_nospin COMMAND test_p2p_shm)
set_tests_properties(test_p2p_shm_nospin PROPERTIES TIMEOUT 30 LABELS "mp" ENVIRONMENT "SPMD_SPIN_US=0;SPMD_CMA=0")
# ... with every large receive read by one thread (transport/cma_parallel.c off).
add_test(NAME test_p2p_shm_oneread COMMAND test_p2p_shm)
set_tests_properties(test_p2p_shm_oneread PROPERTIES TIMEOUT 180 LABELS "mp" ENVIRONMENT "SPMD_P2P_PARALLEL_MIN_BYTES=0")
# Blocking small messages done in the rings without a request (transport/p2p_quick.c):
# bit for bit, matching order, mismatches, a peer killed while waited for;
# again with no spin (the quick receive hands over to the general path at once).
spmd_test(test_p2p_quick SOURCES mp/test_p2p_quick.c LABELS mp TIMEOUT 180)
add_test(NAME test_p2p_quick_nospin COMMAND test_p2p_quick)
set_tests_properties(test_p2p_quick_nospin PROPERTIES TIMEOUT 180 LABELS "mp" ENVIRONMENT "SPMD_SPIN_US=0")
# Large point-to-point messages through the rings (no cross-memory attach).
add_test(NAME test_p2p_nocma COMMAND test_p2p 2)
set_tests_properties(test_p2p_nocma PROPERTIES TIMEOUT 120 LABELS "mp" ENVIRONMENT "SPMD_CMA=0")
# A large message read by two threads of the receiver (transport/cma_parallel.c).
spmd_test(test_cma_parallel SOURCES unit/test_cma_parallel.c LABELS unit TIMEOUT 120)
# SPMD_BIND=core pins the ranks of a host to cores of their own.
spmd_test(test_bind SOURCES mp/test_bind.c LABELS mp TIMEOUT 120)
spmd_test(test_wait_slice SOURCES mp/test_wait_slice.c LABELS mp TIMEOUT 120)
