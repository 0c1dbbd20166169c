# The nn half of the training stack (src/nn): layers, models, optimizers.
spmd_test(test_nn_grad SOURCES unit/test_nn_grad.c LIBS spmdnn LABELS unit nn TIMEOUT 120)
