# Reduce kernels, f16/bf16 conversions, dtype/op names (src/coll/reduce*, half.c; src/common/dtype.c).
spmd_test(test_reduce SOURCES unit/test_reduce.c LABELS unit TIMEOUT 60)
spmd_test(test_reduce_half SOURCES unit/test_reduce_half.c LABELS unit TIMEOUT 60)
spmd_test(test_reduce_dtype SOURCES unit/test_reduce_dtype.c LABELS unit TIMEOUT 30)

# Dispatch: the same executable under each SPMD_REDUCE_ISA value (the argument
# says which one it was given; "bogus" must fall back to the best family).
spmd_test(test_reduce_isa SOURCES unit/test_reduce_isa.c ARGS auto LABELS unit TIMEOUT 30)
foreach(isa scalar avx2 avx512 bogus)
  add_test(NAME test_reduce_isa_${isa} COMMAND test_reduce_isa ${isa})
  set_tests_properties(test_reduce_isa_${isa} PROPERTIES TIMEOUT 30 LABELS unit
                       ENVIRONMENT "SPMD_REDUCE_ISA=${isa};SPMD_LOG_LEVEL=error")
endforeach()

# Benchmark (not a test): GB/s of dst for f32 sum per kernel family.
add_executable(reduce_bench ${PROJECT_SOURCE_DIR}/bench/reduce_bench.c)
target_include_directories(reduce_bench PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(reduce_bench PRIVATE spmd_static)
set_target_properties(reduce_bench PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bench)
