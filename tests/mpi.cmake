# The MPI backend (SPMD_WITH_MPI) in CI, label "mpi": the collective, p2p,
# subgroup, DDP and SyncBatchNorm tests of tests/mp, spmd-train, spmd-bench
# and the examples run under Open MPI's mpirun with SPMD_BACKEND=mpi at
# -np 1..4, each over Open MPI's shared memory (shm) and over
# --mca btl tcp,self (tcp); plus the tests of tests/mpi: groups over an
# application's communicators (MPI_THREAD_MULTIPLE and SERIALIZED), and
# failure (a rank killed, a rank frozen) under mpirun --enable-recovery.
# A test at -np N runs its world-N cases (tests/mp/mpi_job.h).  Each one
# reserves min(N, 2) of ctest's -j slots: ranks spin while they wait, and
# two jobs of two ranks on two cores are enough.
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
endif()

# spmd_mpi_test(<name> <np> <command...> [ENV var=value...]): one test per btl.
function(spmd_mpi_test name np)
  cmake_parse_arguments(M "" "" "ENV" ${ARGN})
  set(slots ${np})
  if(slots GREATER 2)
    set(slots 2)
  endif()
  foreach(btl shm tcp)
    add_test(NAME mpi_${name}_np${np}_${btl} COMMAND sh ${SPMD_MPI_RUN} ${np} ${btl} ${M_UNPARSED_ARGUMENTS})
    set_tests_properties(mpi_${name}_np${np}_${btl} PROPERTIES TIMEOUT 300 LABELS "mpi" SKIP_RETURN_CODE 77
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
foreach(np 1 3 4)
  spmd_mpi_test(test_mpi_comm ${np} ${T}/test_mpi_comm)
endforeach()
spmd_mpi_test(test_mpi_comm_serialized 3 ${T}/test_mpi_comm SERIALIZED)

# A rank killed, a rank frozen: survivors get errors naming it, never a hang.
add_executable(test_mpi_failure mpi/test_mpi_failure.c)
target_link_libraries(test_mpi_failure PRIVATE spmd_static)
target_include_directories(test_mpi_failure PRIVATE ${PROJECT_SOURCE_DIR}/src)
set_target_properties(test_mpi_failure PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${T})
foreach(what kill freeze)
  spmd_mpi_test(failure_${what} 3 ${T}/test_mpi_failure ${what} ENV "MPIRUN_ARGS=--enable-recovery;SPMD_TIMEOUT=60")
endforeach()

# spmd-train (skips without Fashion-MNIST), spmd-bench and the examples.
foreach(np 2 3)
  foreach(btl shm tcp)
    add_test(NAME mpi_spmd_train_np${np}_${btl} COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/mpi/train.sh
             $<TARGET_FILE:spmd-train> $<TARGET_FILE:spmdrun> ${np} ${btl})
    set_tests_properties(mpi_spmd_train_np${np}_${btl} PROPERTIES TIMEOUT 300 LABELS "mpi;nn" SKIP_RETURN_CODE 77
                         PROCESSORS 2 ENVIRONMENT "${SPMD_MPI_ENV}")
  endforeach()
endforeach()
# (one MPI program per rank and mpirun: a second MPI_Init in the same slot fails)
spmd_mpi_test(spmd_bench 3 sh ${CMAKE_CURRENT_SOURCE_DIR}/mpi/bench_rank.sh $<TARGET_FILE:spmd-bench> -o all_reduce
              -b 8 -e 64K -f 8 -n 2 -w 1 -c 1)
spmd_mpi_test(spmd_bench_native 3 $<TARGET_FILE:spmd-bench> -o all_gather --algo mpi -b 8 -e 64K -f 8 -n 2 -w 1 -c 1)
set(E ${PROJECT_BINARY_DIR}/examples)
spmd_mpi_test(example_allreduce_ones 3 ${E}/allreduce_ones 3)
spmd_mpi_test(example_butterfly 4 ${E}/butterfly 4)
spmd_mpi_test(example_collective_asserts 4 ${E}/collective_asserts)
spmd_mpi_test(example_p2p_collectives 4 ${E}/p2p_collectives 4 4099 3)
spmd_mpi_test(example_one_param 2 ${E}/one_param)
foreach(ex pingpong sendrecv isend_irecv)
  spmd_mpi_test(example_${ex} 2 ${E}/${ex})
endforeach()
spmd_mpi_test(example_barrier_order 4 ${E}/barrier_order 4)
spmd_mpi_test(example_mpi_ddp 2 ${E}/mpi_ddp)
spmd_mpi_test(example_mpi_ddp 4 ${E}/mpi_ddp --replicas 2)

# Benchmark (not a test): plain MPI_Allreduce against spmd over MPI in one run.
add_executable(mpi_overhead ${PROJECT_SOURCE_DIR}/bench/mpi_overhead.c)
target_link_libraries(mpi_overhead PRIVATE spmd_static)
set_target_properties(mpi_overhead PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bench)
