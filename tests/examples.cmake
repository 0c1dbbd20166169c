# The point-to-point seed examples, run and their output checked.
foreach(ex barrier_order pingpong sendrecv isend_irecv)
  add_test(NAME example_${ex} COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/examples/check_p2p_examples.sh
           ${PROJECT_BINARY_DIR}/examples ${ex})
  set_tests_properties(example_${ex} PROPERTIES TIMEOUT 180 LABELS "example")
endforeach()
# Seed 004's one-parameter model: 1.4 after the summed step, 1.7 with DDP's mean.
add_test(NAME example_one_param COMMAND one_param)
set_tests_properties(example_one_param PROPERTIES TIMEOUT 180 LABELS "example")
# The training seeds under spmdrun (skip, 77, without the dataset).
foreach(ex custom_allreduce_training ddp_example)
  add_test(NAME example_${ex} COMMAND $<TARGET_FILE:spmdrun> --standalone --nproc-per-node 2 $<TARGET_FILE:${ex}> --steps 30)
  # (a hang guard: 68 s under TSan on a quiet machine, several times that on a busy one)
  set_tests_properties(example_${ex} PROPERTIES TIMEOUT 400 LABELS "example;nn" SKIP_RETURN_CODE 77)
endforeach()
add_test(NAME example_ddp_checkpoint COMMAND $<TARGET_FILE:spmdrun> --standalone --nproc-per-node 3 $<TARGET_FILE:ddp_checkpoint>)
set_tests_properties(example_ddp_checkpoint PROPERTIES TIMEOUT 400 LABELS "example;nn")
