spmd_test(test_ddp SOURCES mp/test_ddp.c LABELS mp TIMEOUT 300)
spmd_test(test_ddp_equiv SOURCES mp/test_ddp_equiv.c LIBS spmdnn LABELS mp nn TIMEOUT 900)
spmd_test(test_syncbn SOURCES mp/test_syncbn.c LIBS spmdnn LABELS mp nn TIMEOUT 120)
spmd_test(test_ddp_convert SOURCES unit/test_ddp_convert.c LABELS unit TIMEOUT 60)
# The sharded optimizer step against the plain one, bit for bit (worlds 1-4, SGD, Adam).
spmd_test(test_ddp_step SOURCES mp/test_ddp_step.c LIBS spmdnn LABELS mp nn TIMEOUT 600)
