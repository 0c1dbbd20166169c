# The point-to-point seed examples, run and their output checked.
foreach(ex barrier_order pingpong sendrecv isend_irecv)
  add_test(NAME example_${ex} COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/examples/check_p2p_examples.sh
           ${PROJECT_BINARY_DIR}/examples ${ex})
  set_tests_properties(example_${ex} PROPERTIES TIMEOUT 60 LABELS "example")
endforeach()
