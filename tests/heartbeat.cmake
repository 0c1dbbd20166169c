# Heartbeats (issue 13 point 3): frozen ranks named within seconds over TCP and
# shared memory, no false alarm during long computations.  The link-drop case
# (network namespaces) and the long mode are in the fault suite (fault.cmake).
spmd_test(test_heartbeat SOURCES mp/test_heartbeat.c LABELS mp fault TIMEOUT 180)
