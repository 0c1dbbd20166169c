# spmd-train's user-facing checks (issue 12): data set and checkpoint shapes,
# corrupt checkpoints, stale temporaries, --plot, the progress line.
add_test(NAME test_train_cli COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/train/train_cli.sh
         $<TARGET_FILE:spmd-train> $<TARGET_FILE:spmdrun>)
set_tests_properties(test_train_cli PROPERTIES TIMEOUT 180 SKIP_RETURN_CODE 77 LABELS "nn;train")
