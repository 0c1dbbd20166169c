# Model parallelism (src/parallel): ZeRO-1, pipeline schedules, tensor-parallel layers, mesh.
spmd_test(test_zero SOURCES parallel/test_zero.c LIBS spmdnn LABELS mp nn parallel TIMEOUT 120)
spmd_test(test_pipe SOURCES parallel/test_pipe.c LIBS spmdnn LABELS mp nn parallel TIMEOUT 240)
spmd_test(test_tp_mesh SOURCES parallel/test_tp_mesh.c LIBS spmdnn LABELS mp nn parallel TIMEOUT 300)
# Benchmark (not a test): measured pipeline bubble against (S-1)/(M+S-1).
add_executable(pipe_bubble ${PROJECT_SOURCE_DIR}/bench/pipe_bubble.c)
target_link_libraries(pipe_bubble PRIVATE spmdnn)
set_target_properties(pipe_bubble PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bench)
# spmd-train --pp/--tp/--zero/--dataset cifar10 end to end on generated CIFAR-10 files.
spmd_test(test_train_parallel SOURCES parallel/test_train_parallel.c LABELS mp nn parallel TIMEOUT 300)
target_compile_definitions(test_train_parallel PRIVATE SPMD_TRAIN_EXE="$<TARGET_FILE:spmd-train>")
add_dependencies(test_train_parallel spmd-train)
# Seed 004's hybrid: the CNN with DP 2 x PP 2 at world 4 under spmdrun (skip, 77, without the dataset).
add_test(NAME example_dp_pp_cnn COMMAND $<TARGET_FILE:spmdrun> --standalone --nproc-per-node 4
         $<TARGET_FILE:dp_pp_cnn> --dp 2 --pp 2 --microbatches 4 --steps 12 --batch 32)
set_tests_properties(example_dp_pp_cnn PROPERTIES TIMEOUT 120 LABELS "example;nn;parallel" SKIP_RETURN_CODE 77)
