# The nn half of the training stack (src/nn): layers, models, optimizers.
spmd_test(test_nn_grad SOURCES unit/test_nn_grad.c LIBS spmdnn LABELS unit nn TIMEOUT 120)
spmd_test(test_nn_torch SOURCES unit/test_nn_torch.c LIBS spmdnn LABELS unit nn TIMEOUT 60)
target_compile_definitions(test_nn_torch PRIVATE FIXTURE_DIR="${PROJECT_SOURCE_DIR}/tests/fixtures")
# spmd-train end to end: exact resume at worlds 1 and 2, and the MLP accuracy run.
foreach(t resume mlp)
  if(t STREQUAL "mlp")
    set(labels "slow;nn")
  else()
    set(labels "nn;mp")
  endif()
  spmd_test(test_nn_train_${t} SOURCES unit/test_nn_train.c LIBS spmdnn ARGS ${t} LABELS ${labels}
            TIMEOUT 180)
  target_compile_definitions(test_nn_train_${t} PRIVATE SPMD_TRAIN_EXE="$<TARGET_FILE:spmd-train>")
  add_dependencies(test_nn_train_${t} spmd-train)
  set_tests_properties(test_nn_train_${t} PROPERTIES SKIP_RETURN_CODE 77)
endforeach()
# Convolution kernels (im2col + OpenBLAS, direct AVX2 / AVX-512) against a reference.
spmd_test(test_nn_conv SOURCES unit/test_nn_conv.c LIBS spmdnn LABELS unit nn TIMEOUT 120)
# The graph's fusions (conv+ReLU, ReLU in place, pool+ReLU backward) against the layers one by one.
spmd_test(test_nn_fusion SOURCES unit/test_nn_fusion.c LIBS spmdnn LABELS unit nn TIMEOUT 60)
# Models as layer lists: built-ins, stage cuts (bit for bit), custom layers, errors.
spmd_test(test_nn_layers SOURCES unit/test_nn_layers.c LIBS spmdnn LABELS unit nn TIMEOUT 120)
# The seeded normal generator (spmd_rng_normal, spmd_rng_normal_fill).
spmd_test(test_nn_rng SOURCES unit/test_nn_rng.c LIBS spmdnn LABELS unit nn TIMEOUT 60)
