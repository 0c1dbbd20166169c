# spmdrun — the torchrun-compatible launcher (tools/spmdrun/*.c, docs/LAUNCHER.md).
# It hosts the workers' TCP store itself, so it links the library statically.
set(SPMDRUN_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/spmdrun/args.c
  ${CMAKE_CURRENT_LIST_DIR}/spmdrun/endpoint.c
  ${CMAKE_CURRENT_LIST_DIR}/spmdrun/env.c
  ${CMAKE_CURRENT_LIST_DIR}/spmdrun/flight.c
  ${CMAKE_CURRENT_LIST_DIR}/spmdrun/guard.c
  ${CMAKE_CURRENT_LIST_DIR}/spmdrun/membership.c
  ${CMAKE_CURRENT_LIST_DIR}/spmdrun/store_failover.c
  ${CMAKE_CURRENT_LIST_DIR}/spmdrun/output.c
  ${CMAKE_CURRENT_LIST_DIR}/spmdrun/rendezvous.c
  ${CMAKE_CURRENT_LIST_DIR}/spmdrun/report.c
  ${CMAKE_CURRENT_LIST_DIR}/spmdrun/supervise.c
  ${CMAKE_CURRENT_LIST_DIR}/spmdrun/trust.c)
add_executable(spmdrun ${SPMDRUN_SOURCES} ${CMAKE_CURRENT_LIST_DIR}/spmdrun/main.c)
target_include_directories(spmdrun PRIVATE ${PROJECT_SOURCE_DIR}/src ${CMAKE_CURRENT_LIST_DIR}/spmdrun)
target_compile_definitions(spmdrun PRIVATE SPMDRUN_VERSION="${PROJECT_VERSION}")
target_link_libraries(spmdrun PRIVATE spmd_static)
set_target_properties(spmdrun PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tools)
install(TARGETS spmdrun RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
