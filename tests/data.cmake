# Tests of the data stack (src/data): IDX datasets, sampler, checkpoints, fuzz replays.
spmd_test(test_data_idx SOURCES unit/test_data_idx.c LIBS spmdnn LABELS unit TIMEOUT 60)
spmd_test(test_data_sampler SOURCES unit/test_data_sampler.c LIBS spmdnn LABELS unit TIMEOUT 60)
spmd_test(test_sampler_reshard SOURCES unit/test_sampler_reshard.c LIBS spmdnn LABELS unit elastic TIMEOUT 60)
spmd_test(test_data_ckpt SOURCES unit/test_data_ckpt.c LIBS spmdnn LABELS unit TIMEOUT 60)
spmd_test(test_data_ckpt_crash SOURCES unit/test_data_ckpt_crash.c LIBS spmdnn LABELS unit TIMEOUT 120)
# PyTorch interop: a committed fixture made by torch (tests/data/make_torch_fixture.py),
# and a C-written file read back by torch (skipped, code 77, when no python3 has torch).
spmd_test(test_data_ckpt_torch SOURCES unit/test_data_ckpt_torch.c LIBS spmdnn LABELS unit
          ARGS fixture ${CMAKE_CURRENT_SOURCE_DIR}/data/torch_fixture.safetensors TIMEOUT 60)
add_test(NAME test_data_ckpt_python
         COMMAND test_data_ckpt_torch python ${CMAKE_CURRENT_SOURCE_DIR}/data/check_safetensors.py)
set_tests_properties(test_data_ckpt_python PROPERTIES SKIP_RETURN_CODE 77 LABELS "unit;python"
                     TIMEOUT 120)
spmd_test(test_data_fashion_mnist SOURCES unit/test_data_fashion_mnist.c LIBS spmdnn
          LABELS "unit;dataset" TIMEOUT 60)
set_tests_properties(test_data_fashion_mnist PROPERTIES SKIP_RETURN_CODE 77)

# Fuzz harnesses of the untrusted-bytes parsers, replayed as normal tests.
foreach(h idx safetensors)
  spmd_test(test_data_fuzz_${h} SOURCES fuzz/fuzz_${h}.c fuzz/replay_main_data.c LIBS spmdnn
            LABELS "unit;fuzz" TIMEOUT 120)
endforeach()
# With -DSPMD_FUZZ=ON and clang: real libFuzzer binaries, the parsers compiled in
# with coverage (as tests/fuzz.cmake does for the store).  Run e.g.
#   ./tests/fuzz_safetensors -max_total_time=60 -max_len=4096 corpus_dir/
if(SPMD_FUZZ)
  if(CMAKE_C_COMPILER_ID MATCHES "Clang")
    set(SPMD_DATA_FUZZ_SRC idx.c dataset.c json.c safetensors.c)
    list(TRANSFORM SPMD_DATA_FUZZ_SRC PREPEND ${PROJECT_SOURCE_DIR}/src/data/)
    foreach(h idx safetensors)
      add_executable(fuzz_${h} fuzz/fuzz_${h}.c ${SPMD_DATA_FUZZ_SRC})
      target_include_directories(fuzz_${h} PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/include)
      target_compile_options(fuzz_${h} PRIVATE -fsanitize=fuzzer,address,undefined
                             -fno-sanitize-recover=undefined)
      target_link_options(fuzz_${h} PRIVATE -fsanitize=fuzzer,address,undefined)
      target_link_libraries(fuzz_${h} PRIVATE spmd_static PkgConfig::ZLIB m)
      set_target_properties(fuzz_${h} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests)
    endforeach()
  else()
    message(WARNING "SPMD_FUZZ=ON needs clang (CC=clang); fuzz_idx/fuzz_safetensors are replay tests only")
  endif()
endif()

# rank 0 saves, barrier, all load (seed 001), over forked ranks on loopback
spmd_test(test_data_ckpt_dist SOURCES mp/test_data_ckpt_dist.c LIBS spmdnn LABELS mp TIMEOUT 120)
# CIFAR-10 binary files (small files in the exact format), normalisation, augmentation, errors.
spmd_test(test_data_cifar SOURCES unit/test_data_cifar.c LIBS spmdnn LABELS unit TIMEOUT 60)
