# spmd-train's DDP path end to end at world 2 under spmdrun (tests/mp/test_ddp_train.c):
# every synchronisation path gives the same replicas, compression stays within
# its precision, SyncBatchNorm at world 2 equals one process on the doubled
# batch, --resume stays bit-exact with the non-default options, and
# --check-sync notices diverged replicas.  Skips (77) without
# Fashion-MNIST.
# The limits are hang guards: syncbn trains ResNet18 five times, 267 s and
# paths 140 s under unoptimised TSan in CI on a quiet 2-core machine; both
# timed out (360 s, 180 s) beside two CPU hogs.
foreach(mode paths compression syncbn resume check_sync)
  set(limit 600)
  if(mode STREQUAL "syncbn")
    set(limit 1200)
  endif()
  spmd_test(test_ddp_train_${mode} SOURCES mp/test_ddp_train.c LIBS spmdnn ARGS ${mode}
            LABELS "mp;nn;ddp" TIMEOUT ${limit})
  target_compile_definitions(test_ddp_train_${mode} PRIVATE SPMD_TRAIN_EXE="$<TARGET_FILE:spmd-train>"
                             SPMDRUN_EXE="$<TARGET_FILE:spmdrun>")
  add_dependencies(test_ddp_train_${mode} spmd-train spmdrun)
  set_tests_properties(test_ddp_train_${mode} PROPERTIES SKIP_RETURN_CODE 77)
endforeach()
