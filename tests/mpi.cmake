# The MPI backend (SPMD_WITH_MPI) in CI, label "mpi": the collective, p2p,
# subgroup, DDP and SyncBatchNorm tests of tests/mp, spmd-train, spmd-bench
# and the examples run under Open MPI's mpirun with SPMD_BACKEND=mpi at
# -np 1..4, the tests over Open MPI's shared memory (shm) and over
# --mca btl tcp,self (tcp); plus the tests of tests/mpi: groups over an
# application's communicators (MPI_THREAD_MULTIPLE and SERIALIZED), and
# failure (a rank killed, a rank frozen) under mpirun --enable-recovery.
# A test at -np N runs its world-N cases (tests/mp/mpi_job.h).  Each one
# reserves min(N, 2) of ctest's -j slots: ranks spin while they wait, and
# two jobs of two ranks on two cores are enough.
#
# Sanitizer builds run the shm variants at -np 2 and 3 only (labels no-asan,
# no-tsan on the rest): spmd's code paths over MPI are the same at every
# world size and for either of Open MPI's transports, and the full matrix
# under ASan took 10 minutes of the CI's 30 on 2 cores.
if(NOT SPMD_HAVE_MPI)
  return()
endif()
set(SPMD_MPI_RUN ${CMAKE_CURRENT_SOURCE_DIR}/mpi/run.sh)
# ASan: the ranks keep every library MPI loads mapped (tests/mpi/lsan_nodelete.c),
# so LeakSanitizer names the Open MPI component of a leak and
# tests/mpi/lsan.supp suppresses Open MPI's own.  The shim is not
# instrumented, so ASan must not insist on coming first.
set(SPMD_MPI_ENV "")
if(SPMD_SANITIZE STREQUAL "address")
  add_library(spmd_lsan_nodelete MODULE mpi/lsan_nodelete.c)
  target_compile_options(spmd_lsan_nodelete PRIVATE -fno-sanitize=all)
  target_link_options(spmd_lsan_nodelete PRIVATE -fno-sanitize=all)
  target_link_libraries(spmd_lsan_nodelete PRIVATE ${CMAKE_DL_LIBS})
  set(SPMD_MPI_ENV "SPMD_MPI_PRELOAD=$<TARGET_FILE:spmd_lsan_nodelete>"
      "LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_SOURCE_DIR}/mpi/lsan.supp:print_suppressions=0"
      "ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:verify_asan_link_order=0:fast_unwind_on_malloc=0")
elseif(SPMD_SANITIZE STREQUAL "thread")
  # MPI is not instrumented: what it does through TSan's interceptors (its memcpy
  # into a buffer another thread reads once MPI_Test says so) is ignored, and
  # reports with an MPI frame are suppressed (tests/mpi/tsan.supp says why)
  set(SPMD_MPI_ENV "TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:ignore_noninstrumented_modules=1:suppressions=${CMAKE_CURRENT_SOURCE_DIR}/mpi/tsan.supp")
endif()

# spmd_mpi_test(<name> <np> <command...> [ENV var=value...] [BTLS shm tcp]
#               [SANITIZED]): one test per btl (default both).  SANITIZED:
#               sanitizer builds run every variant of it too.
function(spmd_mpi_test name np)
  cmake_parse_arguments(M "SANITIZED" "" "ENV;BTLS" ${ARGN})
  if(NOT M_BTLS)
    set(M_BTLS shm tcp)
  endif()
  set(slots ${np})
  if(slots GREATER 2)
    set(slots 2)
  endif()
  foreach(btl ${M_BTLS})
    set(labels "mpi")
    if(NOT M_SANITIZED AND (btl STREQUAL "tcp" OR np LESS 2 OR np GREATER 3))
      set(labels "mpi;no-asan;no-tsan")
    endif()
    add_test(NAME mpi_${name}_np${np}_${btl} COMMAND sh ${SPMD_MPI_RUN} ${np} ${btl} ${M_UNPARSED_ARGUMENTS})
    set_tests_properties(mpi_${name}_np${np}_${btl} PROPERTIES TIMEOUT 300 LABELS "${labels}" SKIP_RETURN_CODE 77
                         PROCESSORS ${slots} ENVIRONMENT "SPMD_SEGMENT_BYTES=256;${SPMD_MPI_ENV};${M_ENV}")
  endforeach()
endfunction()

set(T ${PROJECT_BINARY_DIR}/tests)
foreach(np 1 2 3 4)
  foreach(t test_coll_allreduce test_coll_rooted test_coll_gather test_coll_async test_p2p)
    spmd_mpi_test(${t} ${np} ${T}/${t} ${np} ENV "SPMD_SHM_SLOT_BYTES=4096")
  endforeach()
  spmd_mpi_test(test_ddp ${np} ${T}/test_ddp)
  spmd_mpi_test(test_ddp_step ${np} ${T}/test_ddp_step)
endforeach()
foreach(np 2 3)
  spmd_mpi_test(test_coll_big ${np} ${T}/test_coll_big ${np} ENV "SPMD_SEGMENT_BYTES=")
  spmd_mpi_test(test_coll_errors ${np} ${T}/test_coll_errors ${np})
  spmd_mpi_test(test_ddp_equiv ${np} ${T}/test_ddp_equiv)
endforeach()
spmd_mpi_test(test_coll_errors 1 ${T}/test_coll_errors)   # its world-1 argument checks
spmd_mpi_test(test_syncbn 3 ${T}/test_syncbn)
spmd_mpi_test(test_subgroup 5 ${T}/test_subgroup)

# Groups over the application's communicators; its own thread level.
add_executable(test_mpi_comm mpi/test_mpi_comm.c)
target_link_libraries(test_mpi_comm PRIVATE spmd_static)
set_target_properties(test_mpi_comm PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${T})
spmd_mpi_test(test_mpi_comm 1 ${T}/test_mpi_comm BTLS shm)
foreach(np 3 4)
  spmd_mpi_test(test_mpi_comm ${np} ${T}/test_mpi_comm)
endforeach()
spmd_mpi_test(test_mpi_comm_serialized 3 ${T}/test_mpi_comm SERIALIZED BTLS shm)

# A rank killed, a rank frozen: survivors get errors naming it, never a hang.
add_executable(test_mpi_failure mpi/test_mpi_failure.c)
target_link_libraries(test_mpi_failure PRIVATE spmd_static)
target_include_directories(test_mpi_failure PRIVATE ${PROJECT_SOURCE_DIR}/src)
set_target_properties(test_mpi_failure PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${T})
foreach(what kill freeze)
  spmd_mpi_test(failure_${what} 3 ${T}/test_mpi_failure ${what} ENV "MPIRUN_ARGS=--enable-recovery;SPMD_TIMEOUT=60")
endforeach()
# DDP's shared gradients: a rank dies before its step, the other's finish names it
spmd_mpi_test(test_ddp_dead_peer 2 ${T}/test_ddp dead_peer ENV "MPIRUN_ARGS=--enable-recovery")

# spmd-train (skips without Fashion-MNIST): normal builds only (the training
# stack under sanitizers is covered by tests/mp's spmdrun runs).
foreach(run "1;shm" "2;shm" "2;tcp" "3;shm" "4;tcp")
  list(GET run 0 np)
  list(GET run 1 btl)
  add_test(NAME mpi_spmd_train_np${np}_${btl} COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/mpi/train.sh
           $<TARGET_FILE:spmd-train> $<TARGET_FILE:spmdrun> ${np} ${btl})
  set_tests_properties(mpi_spmd_train_np${np}_${btl} PROPERTIES TIMEOUT 300 LABELS "mpi;nn;no-asan;no-tsan"
                       SKIP_RETURN_CODE 77 PROCESSORS 2 ENVIRONMENT "${SPMD_MPI_ENV}")
endforeach()

# spmd-bench and the examples (over shm: their transport is not what they test).
# (one MPI program per rank and mpirun: a second MPI_Init in the same slot fails)
spmd_mpi_test(spmd_bench 3 sh ${CMAKE_CURRENT_SOURCE_DIR}/mpi/bench_rank.sh $<TARGET_FILE:spmd-bench> -o all_reduce
              -b 8 -e 64K -f 8 -n 2 -w 1 -c 1 BTLS shm)
spmd_mpi_test(spmd_bench_native 3 $<TARGET_FILE:spmd-bench> -o all_gather --algo mpi -b 8 -e 64K -f 8 -n 2 -w 1 -c 1
              BTLS shm)
set(E ${PROJECT_BINARY_DIR}/examples)
spmd_mpi_test(example_allreduce_ones 3 ${E}/allreduce_ones 3 BTLS shm)
spmd_mpi_test(example_butterfly 4 ${E}/butterfly 4 BTLS shm)
spmd_mpi_test(example_collective_asserts 4 ${E}/collective_asserts BTLS shm)
spmd_mpi_test(example_p2p_collectives 4 ${E}/p2p_collectives 4 4099 3 BTLS shm)
spmd_mpi_test(example_one_param 2 ${E}/one_param BTLS shm)
foreach(ex pingpong sendrecv isend_irecv)
  spmd_mpi_test(example_${ex} 2 ${E}/${ex} BTLS shm)
endforeach()
spmd_mpi_test(example_barrier_order 4 ${E}/barrier_order 4 BTLS shm)
spmd_mpi_test(example_mpi_ddp 2 ${E}/mpi_ddp BTLS shm tcp)
spmd_mpi_test(example_mpi_ddp 4 ${E}/mpi_ddp --replicas 2 BTLS shm)

# Benchmark (not a test): plain MPI_Allreduce against spmd over MPI in one run.
add_executable(mpi_overhead ${PROJECT_SOURCE_DIR}/bench/mpi_overhead.c)
target_link_libraries(mpi_overhead PRIVATE spmd_static)
set_target_properties(mpi_overhead PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bench)

# SPMD_BACKEND=mpi outside an MPI launcher while the environment names a
# larger world (spmdrun/torchrun, srun without --mpi): an error naming both.
add_executable(test_mpi_world_env mpi/test_mpi_world_env.c)
target_link_libraries(test_mpi_world_env PRIVATE spmd_static)
set_target_properties(test_mpi_world_env PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${T})
foreach(how torchrun slurm alone)
  add_test(NAME mpi_world_env_${how} COMMAND ${T}/test_mpi_world_env ${how})
  set_tests_properties(mpi_world_env_${how} PROPERTIES TIMEOUT 60 LABELS "mpi"
                       ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;${SPMD_MPI_ENV}")
endforeach()

# The waiting step yields only when ranks outnumber cores (issue 28).
add_executable(test_mpi_idle mpi/test_mpi_idle.c)
target_link_libraries(test_mpi_idle PRIVATE spmd_static)
target_include_directories(test_mpi_idle PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests)
set_target_properties(test_mpi_idle PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${T})
add_test(NAME test_mpi_idle COMMAND ${T}/test_mpi_idle)
set_tests_properties(test_mpi_idle PROPERTIES TIMEOUT 60 LABELS "mpi;unit")
