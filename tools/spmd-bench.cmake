add_executable(spmd-bench ${CMAKE_CURRENT_LIST_DIR}/spmd-bench.c ${CMAKE_CURRENT_LIST_DIR}/spmd-bench-check.c ${CMAKE_CURRENT_LIST_DIR}/spmd-bench-rpc.c)
target_link_libraries(spmd-bench PRIVATE spmd m)
target_include_directories(spmd-bench PRIVATE ${PROJECT_SOURCE_DIR}/src) # header-only helpers of src/common
set_target_properties(spmd-bench PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tools)
install(TARGETS spmd-bench RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
