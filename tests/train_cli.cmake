# spmd-train's user-facing checks (issue 12): data set and checkpoint shapes,
# corrupt checkpoints, stale temporaries, --plot, the progress line.
add_test(NAME test_train_cli COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/train/train_cli.sh
         $<TARGET_FILE:spmd-train> $<TARGET_FILE:spmdrun>)
set_tests_properties(test_train_cli PROPERTIES TIMEOUT 180 SKIP_RETURN_CODE 77 LABELS "nn;train")
# The state_dict round trip with PyTorch (spmd_model_save / --load-model), both
# ways, CNN and MLP: identical test accuracy on both sides.  Skips (77) without
# python3-torch or Fashion-MNIST.  no-tsan: one process with one thread, a
# file-format check, where ThreadSanitizer finds nothing to check while its
# CNN steps take over a minute (the ASan build runs it).
add_test(NAME test_train_torch_roundtrip COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/train/torch_roundtrip.py
         $<TARGET_FILE:spmd-train>)
set_tests_properties(test_train_torch_roundtrip PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                     LABELS "nn;train;python;no-tsan")
