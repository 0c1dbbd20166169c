# spmd-train — data- and model-parallel training (tools/spmd-train/*.c, docs/TRAINING.md).
add_executable(spmd-train
  ${CMAKE_CURRENT_LIST_DIR}/spmd-train/checkpoint.c
  ${CMAKE_CURRENT_LIST_DIR}/spmd-train/ckpt_state.c
  ${CMAKE_CURRENT_LIST_DIR}/spmd-train/elastic.c
  ${CMAKE_CURRENT_LIST_DIR}/spmd-train/elastic_zero.c
  ${CMAKE_CURRENT_LIST_DIR}/spmd-train/input.c
  ${CMAKE_CURRENT_LIST_DIR}/spmd-train/loop.c
  ${CMAKE_CURRENT_LIST_DIR}/spmd-train/main.c
  ${CMAKE_CURRENT_LIST_DIR}/spmd-train/model_gather.c
  ${CMAKE_CURRENT_LIST_DIR}/spmd-train/options.c
  ${CMAKE_CURRENT_LIST_DIR}/spmd-train/parallel.c
  ${CMAKE_CURRENT_LIST_DIR}/spmd-train/report.c
  ${CMAKE_CURRENT_LIST_DIR}/spmd-train/step.c
  ${CMAKE_CURRENT_LIST_DIR}/spmd-train/sync.c)
target_link_libraries(spmd-train PRIVATE spmdnn m)
target_include_directories(spmd-train PRIVATE ${PROJECT_SOURCE_DIR}/src) # header-only helpers of src/common
set_target_properties(spmd-train PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tools)
install(TARGETS spmd-train RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
