# The torch backend (bindings/torch): the seeds' Python programs and the op,
# failure and init-method tests on init_process_group("spmd"), each under the
# launcher it was written for — their own processes (mp.spawn / Process), or
# torchrun and spmdrun both.  Registered only when spmd_torch is built
# (SPMD_WITH_TORCH, cmake/torch.cmake).
# Labels: torch; no-asan and no-tsan because the Python interpreter cannot
# load an extension linked with a sanitized libspmd (the sanitizer runtime
# must come first in the process), so sanitizer builds do not build spmd_torch.
if(TARGET spmd_torch)
  set(TORCH_TEST_DIR ${CMAKE_CURRENT_SOURCE_DIR}/torch)
  function(spmd_torch_test name mode nproc script)
    add_test(NAME ${name}
             COMMAND ${SPMD_PYTHON} ${TORCH_TEST_DIR}/run.py ${mode} ${nproc} ${TORCH_TEST_DIR}/${script} ${ARGN})
    set_tests_properties(${name} PROPERTIES TIMEOUT 180 LABELS "torch;no-asan;no-tsan"
      ENVIRONMENT "SPMD_TORCH_PATH=${PROJECT_BINARY_DIR}/python;SPMDRUN=$<TARGET_FILE:spmdrun>")
  endfunction()
  # seed 000
  spmd_torch_test(torch_seed000_p2p python 1 seed000_p2p.py)
  spmd_torch_test(torch_seed000_allreduce_spawn python 1 seed000_allreduce_spawn.py)
  spmd_torch_test(torch_seed000_butterfly python 1 seed000_butterfly.py)
  # seed 004 (mp.spawn as written, and under both launchers)
  spmd_torch_test(torch_seed004_p2p python 1 seed004_p2p.py)
  foreach(launcher torchrun spmdrun)
    spmd_torch_test(torch_seed000_training_${launcher} ${launcher} 2 seed000_training.py)
    spmd_torch_test(torch_seed000_ddp_${launcher} ${launcher} 2 seed000_ddp.py)
    spmd_torch_test(torch_seed001_collectives_${launcher} ${launcher} 4 seed001_collectives.py)
    spmd_torch_test(torch_seed001_ddp_${launcher} ${launcher} 2 seed001_ddp.py)
    spmd_torch_test(torch_seed004_p2p_${launcher} ${launcher} 2 seed004_p2p.py)
    spmd_torch_test(torch_ops_${launcher} ${launcher} 3 torch_ops.py)
  endforeach()
  # torch 2.x: the backend under torch's named ProcessGroup, functional
  # collectives, a 2-D DeviceMesh, coalesced ops (APIs torch 1.13 lacks)
  if(SPMD_TORCH_MAJOR GREATER_EQUAL 2)
    foreach(launcher torchrun spmdrun)
      spmd_torch_test(torch2_api_${launcher} ${launcher} 4 torch2_api.py)
    endforeach()
    # examples/torch2 run and checked in one group: DeviceMesh, DTensor,
    # functional collectives, FSDP and fully_shard, pipelining, checkpoints;
    # and the collectives' features a torch 2.x user expects (label torch2)
    spmd_torch_test(torch2_parallel torchrun 4 torch2_parallel.py)
    spmd_torch_test(torch2_features spmdrun 4 torch2_features.py)
    set_tests_properties(torch2_parallel torch2_features PROPERTIES LABELS "torch;torch2;no-asan;no-tsan")
  endif()
  # monitored_barrier, per-operation timeouts, destroy with a peer gone
  # (both torches; in the torch2 label on 2.x)
  spmd_torch_test(torch_timeouts python 1 torch_timeouts.py)
  # what torch's suite checks beyond results: profiler events of the list
  # and coalesced collectives, sequence numbers (both torches)
  spmd_torch_test(torch_suite_parity python 1 torch_suite_parity.py)
  if(SPMD_TORCH_MAJOR GREATER_EQUAL 2)
    set_tests_properties(torch_timeouts torch_suite_parity PROPERTIES LABELS "torch;torch2;no-asan;no-tsan")
  endif()
  # The README's pip path, installed into a temporary directory and used
  # alone.  It builds libspmd and the module from scratch: one at a time.
  add_test(NAME torch_pip_install
           COMMAND ${SPMD_PYTHON} ${TORCH_TEST_DIR}/pip_install.py ${PROJECT_SOURCE_DIR})
  set_tests_properties(torch_pip_install PROPERTIES TIMEOUT 1800 LABELS "torch;no-asan;no-tsan"
    RESOURCE_LOCK spmd_torch_pip)
  # torch's own distributed suite (tests/torch/suite), the part CI runs on
  # both torches, each test required to pass on spmd at world 2: the tests
  # torch gates on the name "gloo" (timeouts, batch isend/irecv, object
  # lists, sparse all_reduce), the backend's name, and the tests spmd once
  # failed where gloo passed (profiler events of the list and coalesced
  # collectives, sequence numbers under a subgroup, monitored_barrier's
  # wording; on torch 2.x the name DDP's logger records).  The whole suite,
  # gloo against spmd: make torch-suite / torch-suite2.  The ranks are forked
  # from the runner (--start fork, as those targets do), not spawned: a
  # spawned rank re-imports torch and the suite, seconds of CPU each.
  set(TORCH_DIST_SUITE_TESTS test_barrier_timeout_full_group test_batch_isend_irecv_gloo
      test_broadcast_object_list test_sparse_all_reduce_sum test_get_backend
      test_all_gather test_all_gather_coalesced_simple test_all_reduce_coalesced_sum
      test_all_gather_object_subgroup test_monitored_barrier_gloo
      test_monitored_barrier_gloo_rank_0_timeout)
  if(SPMD_TORCH_MAJOR GREATER_EQUAL 2)
    # torch 1.13's errs on Python 3.11 for every backend (a dataclass of its
    # sharded-tensor metadata)
    list(APPEND TORCH_DIST_SUITE_TESTS test_ddp_logging_data_cpu)
  endif()
  add_test(NAME torch_dist_suite
           COMMAND ${CMAKE_COMMAND} -E env BACKEND=spmd WORLD_SIZE=2
                   PYTHONPATH=${PROJECT_BINARY_DIR}/python
                   ${SPMD_PYTHON} ${TORCH_TEST_DIR}/suite/dist_suite.py --require-pass --start fork
                   ${TORCH_DIST_SUITE_TESTS}
           WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
  set_tests_properties(torch_dist_suite PROPERTIES TIMEOUT 300 LABELS "torch;no-asan;no-tsan")
  spmd_torch_test(torch_init_methods python 1 torch_init_methods.py)
  spmd_torch_test(torch_failure python 1 torch_failure.py)
  # spmd_torch.elastic: DDP at world 3 under spmdrun, a rank SIGKILLed
  # mid-step: the survivors go on (rank 2; rank 0), or grow back with a
  # replacement (--on-failure replace); both torches
  spmd_torch_test(torch_elastic python 1 torch_elastic.py shrink)
  spmd_torch_test(torch_elastic_rank0 python 1 torch_elastic.py rank0)
  spmd_torch_test(torch_elastic_replace python 1 torch_elastic.py replace)
endif()
