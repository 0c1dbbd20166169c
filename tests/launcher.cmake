# Launcher tests: spmdrun's argument parsing and output assembly as unit tests,
# then the launcher itself driven by shell scripts (tests/launcher/*.sh) that run
# tests/launcher/worker.c under it.  Scripts exit 77 to skip (SKIP_RETURN_CODE).
set(SR_DIR ${PROJECT_SOURCE_DIR}/tools/spmdrun)

spmd_test(test_launcher_args SOURCES launcher/test_args.c ${SR_DIR}/args.c ${SR_DIR}/endpoint.c ${SR_DIR}/env.c
          LABELS "unit;launcher" TIMEOUT 30)
target_include_directories(test_launcher_args PRIVATE ${SR_DIR})
spmd_test(test_launcher_output SOURCES launcher/test_output.c ${SR_DIR}/output.c ${SR_DIR}/env.c
          ${SR_DIR}/report.c ${SR_DIR}/args.c ${SR_DIR}/endpoint.c LABELS "unit;launcher" TIMEOUT 30)
target_include_directories(test_launcher_output PRIVATE ${SR_DIR})

add_executable(launcher_worker launcher/worker.c)
target_link_libraries(launcher_worker PRIVATE spmd_static)
set_target_properties(launcher_worker PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests)

# Workers that form a group: the two-node test and the start-up benchmark.
foreach(prog allreduce barrier)
  add_executable(launcher_${prog} launcher/${prog}.c)
  target_link_libraries(launcher_${prog} PRIVATE spmd_static)
  set_target_properties(launcher_${prog} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests)
endforeach()

function(spmd_launcher_script name script)
  cmake_parse_arguments(S "" "TIMEOUT" "LABELS;ARGS" ${ARGN})
  add_test(NAME ${name}
    COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/launcher/${script}
            $<TARGET_FILE:spmdrun> $<TARGET_FILE:launcher_worker> ${S_ARGS})
  if(NOT S_TIMEOUT)
    set(S_TIMEOUT 60)
  endif()
  set_tests_properties(${name} PROPERTIES TIMEOUT ${S_TIMEOUT} SKIP_RETURN_CODE 77
    LABELS "launcher;${S_LABELS}")
endfunction()

spmd_launcher_script(launcher_env env.sh)
spmd_launcher_script(launcher_fail_exit fail.sh ARGS exit)
spmd_launcher_script(launcher_fail_signal fail.sh ARGS kill9)
spmd_launcher_script(launcher_restart restart.sh)
spmd_launcher_script(launcher_output output.sh)
spmd_launcher_script(launcher_standalone standalone.sh)
spmd_launcher_script(launcher_signals signals.sh)
spmd_launcher_script(launcher_spawn spawn.sh ARGS ${PROJECT_BINARY_DIR}/examples/allreduce_ones)
spmd_launcher_script(launcher_multinode multinode.sh)
spmd_launcher_script(launcher_elastic elastic.sh)
# Needs root (network namespaces) and the group library; skips (77) without the former.
spmd_launcher_script(launcher_netns netns.sh ARGS $<TARGET_FILE:launcher_allreduce>
                     LABELS "netns;group")
spmd_launcher_script(launcher_local_rank local_rank.sh)
# Every documented launch path with no secret set (the per-user secret), in
# network namespaces; needs root, skips (77) without namespaces.
add_executable(launcher_selfform launcher/selfform.c)
target_link_libraries(launcher_selfform PRIVATE spmd_static)
set_target_properties(launcher_selfform PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests)
spmd_launcher_script(launcher_nosecret nosecret.sh ARGS $<TARGET_FILE:launcher_allreduce>
                     $<TARGET_FILE:launcher_selfform> LABELS "netns;group;auth" TIMEOUT 300)
# A real one-host Slurm cluster started by the test (slurm-wlm): the batch
# scripts of docs/LAUNCHER.md and seed 003, spmd-train under srun, a task of
# another uid refused; needs root, skips (77) without Slurm.
# With the MPI backend built (last argument 1), also srun --mpi=pmix.
if(SPMD_HAVE_MPI)
  set(SLURM_TEST_MPI 1)
else()
  set(SLURM_TEST_MPI 0)
endif()
spmd_launcher_script(launcher_slurm slurm.sh ARGS $<TARGET_FILE:launcher_allreduce>
                     $<TARGET_FILE:spmd-train> ${SLURM_TEST_MPI} LABELS "slurm;group;auth" TIMEOUT 120)
# The srun --mpi=pmix step's tasks get the MPI tests' sanitizer settings
# (tests/mpi.cmake: Open MPI's own leaks and lock order are not spmd's).
if(SPMD_HAVE_MPI AND SPMD_SANITIZE STREQUAL "thread")
  set_tests_properties(launcher_slurm PROPERTIES ENVIRONMENT
    "SPMD_TEST_MPI_ENV=TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:ignore_noninstrumented_modules=1:suppressions=${CMAKE_CURRENT_SOURCE_DIR}/mpi/tsan.supp")
elseif(SPMD_HAVE_MPI AND SPMD_SANITIZE STREQUAL "address")
  set_tests_properties(launcher_slurm PROPERTIES ENVIRONMENT
    "SPMD_TEST_MPI_ENV=LD_PRELOAD=$<TARGET_FILE:spmd_lsan_nodelete> LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_SOURCE_DIR}/mpi/lsan.supp:print_suppressions=0 ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:verify_asan_link_order=0:fast_unwind_on_malloc=0")
endif()
