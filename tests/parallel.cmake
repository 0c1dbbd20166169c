# Model parallelism (src/parallel): ZeRO-1, pipeline schedules, tensor-parallel layers, mesh.
spmd_test(test_zero SOURCES parallel/test_zero.c LIBS spmdnn LABELS mp nn parallel TIMEOUT 120)
spmd_test(test_pipe SOURCES parallel/test_pipe.c LIBS spmdnn LABELS mp nn parallel TIMEOUT 240)
spmd_test(test_tp_mesh SOURCES parallel/test_tp_mesh.c LIBS spmdnn LABELS mp nn parallel TIMEOUT 300)
