# Tests of the data stack (src/data): IDX datasets, sampler, checkpoints, fuzz replays.
spmd_test(test_data_idx SOURCES unit/test_data_idx.c LIBS spmdnn LABELS unit TIMEOUT 60)
spmd_test(test_data_sampler SOURCES unit/test_data_sampler.c LIBS spmdnn LABELS unit TIMEOUT 60)
spmd_test(test_data_ckpt SOURCES unit/test_data_ckpt.c LIBS spmdnn LABELS unit TIMEOUT 60)
spmd_test(test_data_ckpt_crash SOURCES unit/test_data_ckpt_crash.c LIBS spmdnn LABELS unit TIMEOUT 120)
