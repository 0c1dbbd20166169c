# spmd-train's DCP checkpoints across world sizes and --zero/--tp/--pp layouts
# (tests/train/test_train_dcp.c): save, resume elsewhere, bit-identical state.
spmd_test(test_train_dcp SOURCES train/test_train_dcp.c LIBS spmdnn LABELS mp nn train ckpt TIMEOUT 600)
target_compile_definitions(test_train_dcp PRIVATE SPMD_TRAIN_EXE="$<TARGET_FILE:spmd-train>")
add_dependencies(test_train_dcp spmd-train)
# torch 2.x's dcp.load of an spmd-train checkpoint (world 2, ZeRO-1, Adam) into
# the seeds' CNN and its optimizer: torch's names and shapes (issue 26).  Runs
# wherever python3 has torch 2.x (`make check-torch2`'s root), skips (77) elsewhere.
add_test(NAME test_train_torch_dcp COMMAND python3 -W ignore ${CMAKE_CURRENT_SOURCE_DIR}/train/check_torch_dcp.py
         $<TARGET_FILE:spmd-train> $<TARGET_FILE:spmdrun>)
set_tests_properties(test_train_torch_dcp PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                     LABELS "mp;train;python;torch2")
