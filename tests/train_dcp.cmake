# spmd-train's DCP checkpoints across world sizes and --zero/--tp/--pp layouts
# (tests/train/test_train_dcp.c): save, resume elsewhere, bit-identical state.
spmd_test(test_train_dcp SOURCES train/test_train_dcp.c LIBS spmdnn LABELS mp nn train ckpt TIMEOUT 300)
target_compile_definitions(test_train_dcp PRIVATE SPMD_TRAIN_EXE="$<TARGET_FILE:spmd-train>")
add_dependencies(test_train_dcp spmd-train)
