# Examples that use the training stack (examples/train/*.c, linked with spmdnn).
file(GLOB SPMD_TRAIN_EXAMPLES ${CMAKE_CURRENT_LIST_DIR}/train/*.c)
foreach(src ${SPMD_TRAIN_EXAMPLES})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src})
  target_link_libraries(${name} PRIVATE spmdnn)
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/examples)
endforeach()
