# Fault injection (tests/fault/): strangers on the store and mesh ports, killed
# ranks under spmdrun and spmd_spawn, orphans.  Small counts here; the long
# mode is bench/fault_trials.sh (docs/RELIABILITY.md).
spmd_test(test_fault_store SOURCES fault/test_fault_store.c LABELS fault store ARGS 500 TIMEOUT 120)
# Secret files and the per-user secret against another uid (issue 29, 23).
spmd_test(test_secret_file SOURCES fault/test_secret_file.c LABELS fault auth TIMEOUT 120)
set_tests_properties(test_secret_file PROPERTIES SKIP_RETURN_CODE 77)
spmd_test(test_fault_mesh SOURCES fault/test_fault_mesh.c LABELS fault ARGS 20 TIMEOUT 120)
add_executable(fault_worker fault/fault_worker.c)
target_link_libraries(fault_worker PRIVATE spmd_static)
set_target_properties(fault_worker PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests)
add_test(NAME fault_kill_spmdrun COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/fault/kill_trials.sh
         $<TARGET_FILE:spmdrun> $<TARGET_FILE:fault_worker> 4 4)
add_test(NAME fault_orphans COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/fault/orphans.sh
         $<TARGET_FILE:spmdrun> $<TARGET_FILE:fault_worker>)
add_test(NAME fault_intruder COMMAND $<TARGET_FILE:spmdrun> --standalone --nproc-per-node=3
         $<TARGET_FILE:fault_worker>)
set_tests_properties(fault_intruder PROPERTIES ENVIRONMENT "FAULT_MODE=intrude")
set_tests_properties(fault_kill_spmdrun fault_orphans fault_intruder PROPERTIES LABELS "fault" TIMEOUT 300)
spmd_test(test_fault_spawn SOURCES fault/test_fault_spawn.c LABELS fault mp ARGS 4 4 TIMEOUT 300)
# Connection set-up time with and without authentication (docs/RELIABILITY.md).
add_executable(auth_setup ${PROJECT_SOURCE_DIR}/bench/auth_setup.c)
target_include_directories(auth_setup PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(auth_setup PRIVATE spmd_static)
set_target_properties(auth_setup PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bench)
add_executable(store_flood ${PROJECT_SOURCE_DIR}/bench/store_flood.c)
target_include_directories(store_flood PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(store_flood PRIVATE spmd_static)
set_target_properties(store_flood PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bench)
add_test(NAME fault_secret_config COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/fault/secret_config.sh
         $<TARGET_FILE:spmdrun> $<TARGET_FILE:fault_worker>)
set_tests_properties(fault_secret_config PROPERTIES LABELS "fault" TIMEOUT 120)
# Frozen ranks and dropped links (heartbeats) and forced hangs (the flight
# recorder), issue 13; test_heartbeat is in heartbeat.cmake.
add_test(NAME fault_stop_spmdrun COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/fault/stop_trials.sh
         $<TARGET_FILE:spmdrun> $<TARGET_FILE:fault_worker> 4 4)
add_test(NAME fault_hang COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/fault/hang.sh
         $<TARGET_FILE:spmdrun> $<TARGET_FILE:fault_worker>)
set_tests_properties(fault_stop_spmdrun fault_hang PROPERTIES LABELS "fault;launcher" TIMEOUT 120)
add_test(NAME fault_linkdrop COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/fault/linkdrop.sh $<TARGET_FILE:fault_worker> 1)
set_tests_properties(fault_linkdrop PROPERTIES LABELS "fault;netns" TIMEOUT 120 SKIP_RETURN_CODE 77 RUN_SERIAL TRUE)
