# The nn half of the training stack (src/nn): layers, models, optimizers.
spmd_test(test_nn_grad SOURCES unit/test_nn_grad.c LIBS spmdnn LABELS unit nn TIMEOUT 120)
spmd_test(test_nn_torch SOURCES unit/test_nn_torch.c LIBS spmdnn LABELS unit nn TIMEOUT 60)
target_compile_definitions(test_nn_torch PRIVATE FIXTURE_DIR="${PROJECT_SOURCE_DIR}/tests/fixtures")
