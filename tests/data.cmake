# Tests of the data stack (src/data): IDX datasets, sampler, checkpoints, fuzz replays.
spmd_test(test_data_idx SOURCES unit/test_data_idx.c LIBS spmdnn LABELS unit TIMEOUT 60)
spmd_test(test_data_sampler SOURCES unit/test_data_sampler.c LIBS spmdnn LABELS unit TIMEOUT 60)
spmd_test(test_data_ckpt SOURCES unit/test_data_ckpt.c LIBS spmdnn LABELS unit TIMEOUT 60)
spmd_test(test_data_ckpt_crash SOURCES unit/test_data_ckpt_crash.c LIBS spmdnn LABELS unit TIMEOUT 120)
# PyTorch interop: a committed fixture made by torch (tests/data/make_torch_fixture.py),
# and a C-written file read back by torch (skipped, code 77, when no python3 has torch).
spmd_test(test_data_ckpt_torch SOURCES unit/test_data_ckpt_torch.c LIBS spmdnn LABELS unit
          ARGS fixture ${CMAKE_CURRENT_SOURCE_DIR}/data/torch_fixture.safetensors TIMEOUT 60)
add_test(NAME test_data_ckpt_python
         COMMAND test_data_ckpt_torch python ${CMAKE_CURRENT_SOURCE_DIR}/data/check_safetensors.py)
set_tests_properties(test_data_ckpt_python PROPERTIES SKIP_RETURN_CODE 77 LABELS "unit;python"
                     TIMEOUT 120)
spmd_test(test_data_fashion_mnist SOURCES unit/test_data_fashion_mnist.c LIBS spmdnn
          LABELS "unit;dataset" TIMEOUT 60)
set_tests_properties(test_data_fashion_mnist PROPERTIES SKIP_RETURN_CODE 77)
