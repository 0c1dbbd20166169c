# The flight recorder (issue 13 point 4): the record format and the diagnosis
# (unit), the records written by a failing group (mp), spmdrun's diagnosis of
# a forced hang and its SIGUSR1 dump (launcher).  The parser's fuzz harness is
# in fuzz.cmake.
spmd_test(test_flight_record SOURCES unit/test_flight_record.c LABELS unit TIMEOUT 30)
# What the recorder adds to one operation, without network noise (docs/performance-log.md).
add_executable(recorder_cost ${PROJECT_SOURCE_DIR}/bench/recorder_cost.c)
target_include_directories(recorder_cost PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(recorder_cost PRIVATE spmd_static)
set_target_properties(recorder_cost PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bench)
spmd_test(test_recorder SOURCES mp/test_recorder.c LABELS mp TIMEOUT 120)
# What an idle group's progress thread costs (ticks, heartbeats), with both on and off.
add_executable(idle_cost ${PROJECT_SOURCE_DIR}/bench/idle_cost.c)
target_link_libraries(idle_cost PRIVATE spmd_static)
set_target_properties(idle_cost PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bench)
# Heartbeats and the recorder on against off in one pair of processes (docs/performance-log.md).
add_executable(watch_pair ${PROJECT_SOURCE_DIR}/bench/watch_pair.c)
target_link_libraries(watch_pair PRIVATE spmd_static)
set_target_properties(watch_pair PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bench)
