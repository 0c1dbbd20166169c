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

# spmd-encoded metadata read by torch's dcp.load (torch's data files): runs
# wherever python3 has torch 2.x (the Debian 13 root of `make check-torch2`),
# skipped (77) elsewhere.
add_test(NAME test_ckpt_torch_load
         COMMAND sh -c "d=$(mktemp -d) && trap 'rm -rf \"$d\"' EXIT && \"$0\" reencode \"$1\" \"$d\" && python3 -W ignore \"$2\" \"$d\""
                 $<TARGET_FILE:test_ckpt_fixture> ${CMAKE_CURRENT_SOURCE_DIR}/ckpt/fixtures/dcp_w2
                 ${CMAKE_CURRENT_SOURCE_DIR}/ckpt/check_torch_load.py)
set_tests_properties(test_ckpt_torch_load PROPERTIES SKIP_RETURN_CODE 77 LABELS "unit;ckpt;python;torch2"
                     TIMEOUT 600)
spmd_test(test_ckpt_load SOURCES ckpt/test_ckpt_load.c LIBS spmdnn LABELS "unit;ckpt"
          ARGS ${CMAKE_CURRENT_SOURCE_DIR}/ckpt/fixtures TIMEOUT 60)
# The data file written straight from the shards' memory: peak memory, golden bytes.
spmd_test(test_ckpt_write SOURCES ckpt/test_ckpt_write.c LIBS spmdnn LABELS "unit;ckpt" TIMEOUT 120)
spmd_test(test_ckpt_dist SOURCES ckpt/test_ckpt_dist.c LIBS spmdnn LABELS "mp;ckpt" TIMEOUT 240)
# A world-2 save by spmd's ranks read by torch's dcp.load (python3 with torch
# 2.x, e.g. in `make check-torch2`'s root; skipped, 77, elsewhere).
add_test(NAME test_ckpt_torch_load_spmd
         COMMAND sh -c "d=$(mktemp -d) && trap 'rm -rf \"$d\"' EXIT && python3 -c 'import torch.distributed.checkpoint' 2>/dev/null || exit 77; \"$0\" \"$d/ck\" && python3 -W ignore \"$1\" \"$d/ck\""
                 $<TARGET_FILE:test_ckpt_dist> ${CMAKE_CURRENT_SOURCE_DIR}/ckpt/check_torch_load_spmd.py)
set_tests_properties(test_ckpt_torch_load_spmd PROPERTIES SKIP_RETURN_CODE 77
                     LABELS "mp;ckpt;python;torch2" TIMEOUT 600)
spmd_test(test_ckpt_kill SOURCES ckpt/test_ckpt_kill.c LIBS spmdnn LABELS "mp;ckpt;fault" ARGS 3 TIMEOUT 300)
# The same kills landing in async saves (spmd_dcp_save_async's background thread).
add_test(NAME test_ckpt_kill_async COMMAND test_ckpt_kill 3 -1 async)
set_tests_properties(test_ckpt_kill_async PROPERTIES TIMEOUT 300 LABELS "mp;ckpt;fault")

# The data-item reader (torch.save archives in .distcp files), fuzzed the same way:
#   ./tests/fuzz_torch_item -max_total_time=60 -max_len=8192 corpus_dir/
spmd_test(test_ckpt_fuzz_torch_item SOURCES fuzz/fuzz_torch_item.c fuzz/replay_main_data.c LIBS spmdnn
          LABELS "unit;fuzz;ckpt" TIMEOUT 120)
if(SPMD_FUZZ AND CMAKE_C_COMPILER_ID MATCHES "Clang")
  add_executable(fuzz_torch_item fuzz/fuzz_torch_item.c ${SPMD_CKPT_FUZZ_SRC}
                 ${PROJECT_SOURCE_DIR}/src/ckpt/torch_zip.c ${PROJECT_SOURCE_DIR}/src/ckpt/torch_save.c
                 ${PROJECT_SOURCE_DIR}/src/ckpt/file_writer.c
                 ${PROJECT_SOURCE_DIR}/src/ckpt/dcp_value.c ${PROJECT_SOURCE_DIR}/src/ckpt/dcp_load.c)
  target_include_directories(fuzz_torch_item PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/include
                             ${PROJECT_SOURCE_DIR}/tests)
  target_compile_options(fuzz_torch_item PRIVATE -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined)
  target_link_options(fuzz_torch_item PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_libraries(fuzz_torch_item PRIVATE spmd_static PkgConfig::ZLIB m)
  set_target_properties(fuzz_torch_item PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests)
endif()
spmd_test(test_ckpt_async SOURCES ckpt/test_ckpt_async.c LIBS spmdnn LABELS "mp;ckpt" TIMEOUT 240)
# Benchmark (not a test): save/load bandwidth and the async stall (bench/ckpt_bench.sh).
add_executable(ckpt_bench ${PROJECT_SOURCE_DIR}/bench/ckpt_bench.c)
target_link_libraries(ckpt_bench PRIVATE spmdnn)
set_target_properties(ckpt_bench PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bench)
# Bytes items holding Python values (optimizer param_groups ...) from torch 2.6's dcp.save.
spmd_test(test_ckpt_value SOURCES ckpt/test_ckpt_value.c LIBS spmdnn LABELS "unit;ckpt"
          ARGS ${CMAKE_CURRENT_SOURCE_DIR}/ckpt/fixtures TIMEOUT 60)
# The same checks on a dcp_optim this machine's torch 2.x writes now (the
# torch2 root of `make check-torch2`; skipped, 77, without torch 2.x).
add_test(NAME test_ckpt_value_torch
         COMMAND sh -c "python3 -c 'import torch.distributed.checkpoint' 2>/dev/null || exit 77; d=$(mktemp -d) && trap 'rm -rf \"$d\"' EXIT && python3 -W ignore \"$1\" \"$d\" dcp_optim >/dev/null && \"$0\" \"$d\""
                 $<TARGET_FILE:test_ckpt_value> ${CMAKE_CURRENT_SOURCE_DIR}/ckpt/make_dcp_fixtures.py)
set_tests_properties(test_ckpt_value_torch PROPERTIES SKIP_RETURN_CODE 77 LABELS "unit;ckpt;python;torch2"
                     TIMEOUT 300)
