# Tests of the DCP-format checkpoints (src/ckpt, include/spmd/ckpt.h).
spmd_test(test_ckpt_pickle SOURCES ckpt/test_ckpt_pickle.c LIBS spmdnn LABELS "unit;ckpt" TIMEOUT 60)

# The restricted pickle reader's fuzz harness, replayed as a normal test; with
# -DSPMD_FUZZ=ON and clang also a libFuzzer binary:
#   ./tests/fuzz_pickle -max_total_time=60 -max_len=8192 corpus_dir/
spmd_test(test_ckpt_fuzz_pickle SOURCES fuzz/fuzz_pickle.c fuzz/replay_main_data.c LIBS spmdnn
          LABELS "unit;fuzz;ckpt" TIMEOUT 120)
if(SPMD_FUZZ AND CMAKE_C_COMPILER_ID MATCHES "Clang")
  set(SPMD_CKPT_FUZZ_SRC pickle_read.c pickle_write.c dcp_meta.c dcp_check.c)
  list(TRANSFORM SPMD_CKPT_FUZZ_SRC PREPEND ${PROJECT_SOURCE_DIR}/src/ckpt/)
  add_executable(fuzz_pickle fuzz/fuzz_pickle.c ${SPMD_CKPT_FUZZ_SRC})
  target_include_directories(fuzz_pickle PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/include
                             ${PROJECT_SOURCE_DIR}/tests)
  target_compile_options(fuzz_pickle PRIVATE -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined)
  target_link_options(fuzz_pickle PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_libraries(fuzz_pickle PRIVATE spmd_static m)
  set_target_properties(fuzz_pickle PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests)
endif()

# .metadata files written by torch 2.6's dcp.save (tests/ckpt/make_dcp_fixtures.py).
spmd_test(test_ckpt_fixture SOURCES ckpt/test_ckpt_fixture.c LIBS spmdnn LABELS "unit;ckpt"
          ARGS ${CMAKE_CURRENT_SOURCE_DIR}/ckpt/fixtures TIMEOUT 60)
