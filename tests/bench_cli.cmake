# spmd-bench's command line against nccl-tests' habits (issue 12).
add_test(NAME test_bench_cli COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/tools/spmd_bench_cli.sh
         $<TARGET_FILE:spmd-bench> $<TARGET_FILE:spmdrun>)
set_tests_properties(test_bench_cli PROPERTIES TIMEOUT 60 LABELS "bench-tool")
