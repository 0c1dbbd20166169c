add_executable(spmd-train ${CMAKE_CURRENT_LIST_DIR}/spmd-train.c)
target_link_libraries(spmd-train PRIVATE spmdnn m)
set_target_properties(spmd-train PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tools)
install(TARGETS spmd-train RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
