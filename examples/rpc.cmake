# The RPC seed tutorials (examples/rpc/*.c), linked with the training stack
# (which includes libspmd) since some train models.
file(GLOB SPMD_RPC_EXAMPLES ${CMAKE_CURRENT_LIST_DIR}/rpc/*.c)
foreach(src ${SPMD_RPC_EXAMPLES})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src})
  target_link_libraries(${name} PRIVATE spmdnn)
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/examples)
endforeach()
