# spmdrun — the torchrun-compatible launcher (tools/spmdrun/*.c).
# It hosts the TCP store for its workers, so it needs the store from libspmd;
# until src/store/ has landed in the checkout there is nothing to link against.
if(EXISTS ${PROJECT_SOURCE_DIR}/src/store/CMakeLists.txt)
  set(SPMDRUN_SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/spmdrun/args.c
    ${CMAKE_CURRENT_LIST_DIR}/spmdrun/endpoint.c
    ${CMAKE_CURRENT_LIST_DIR}/spmdrun/env.c
    ${CMAKE_CURRENT_LIST_DIR}/spmdrun/guard.c
    ${CMAKE_CURRENT_LIST_DIR}/spmdrun/output.c
    ${CMAKE_CURRENT_LIST_DIR}/spmdrun/rendezvous.c
    ${CMAKE_CURRENT_LIST_DIR}/spmdrun/report.c
    ${CMAKE_CURRENT_LIST_DIR}/spmdrun/supervise.c)
  add_executable(spmdrun ${SPMDRUN_SOURCES} ${CMAKE_CURRENT_LIST_DIR}/spmdrun/main.c)
  target_include_directories(spmdrun PRIVATE ${PROJECT_SOURCE_DIR}/src ${CMAKE_CURRENT_LIST_DIR}/spmdrun)
  target_compile_definitions(spmdrun PRIVATE SPMDRUN_VERSION="${PROJECT_VERSION}")
  target_link_libraries(spmdrun PRIVATE spmd_static)
  set_target_properties(spmdrun PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tools)
  install(TARGETS spmdrun RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
else()
  message(STATUS "spmdrun: src/store/ not in the tree yet; the launcher is not built")
endif()
