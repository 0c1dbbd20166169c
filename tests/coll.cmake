# Collectives (src/coll/: patterns, algorithms, selection, public API) and the
# seed examples that use them.
spmd_test(test_pattern SOURCES unit/test_pattern.c LABELS unit TIMEOUT 30)
spmd_test(test_coll_trial SOURCES unit/test_coll_trial.c LABELS unit TIMEOUT 30)

# all_reduce: full dtype x op x algorithm matrix at worlds 1-4, a reduced one
# at 5, 7, 8, a single case at 16 (one ctest entry each so -j2 spreads them).
spmd_test(test_coll_allreduce SOURCES mp/test_coll_allreduce.c ARGS 1 2 LABELS mp TIMEOUT 200)
foreach(w 3 4 5 7 8 16)
  add_test(NAME test_coll_allreduce_w${w} COMMAND test_coll_allreduce ${w})
  set_tests_properties(test_coll_allreduce_w${w} PROPERTIES TIMEOUT 200 LABELS mp)
endforeach()

# broadcast, reduce, gather, scatter: every algorithm and several roots.
spmd_test(test_coll_rooted SOURCES mp/test_coll_rooted.c ARGS 1 2 3 LABELS mp TIMEOUT 200)
foreach(w 4 5 7 8)
  add_test(NAME test_coll_rooted_w${w} COMMAND test_coll_rooted ${w})
  set_tests_properties(test_coll_rooted_w${w} PROPERTIES TIMEOUT 200 LABELS mp)
endforeach()

# all_gather (flat, list, in place), reduce_scatter, all_to_all(_v), barrier.
spmd_test(test_coll_gather SOURCES mp/test_coll_gather.c ARGS 1 2 3 LABELS mp TIMEOUT 200)
foreach(w 4 5 7 8 16)
  add_test(NAME test_coll_gather_w${w} COMMAND test_coll_gather ${w})
  set_tests_properties(test_coll_gather_w${w} PROPERTIES TIMEOUT 200 LABELS mp)
endforeach()

# async collectives interleaved with p2p, many in flight, waited out of order.
spmd_test(test_coll_async SOURCES mp/test_coll_async.c LABELS mp TIMEOUT 200)

# bad arguments (INVALID, same message everywhere, group usable) and ranks
# that disagree (error on every rank, never a hang).
spmd_test(test_coll_errors SOURCES mp/test_coll_errors.c LABELS mp TIMEOUT 200)

# ranks that disagree on the algorithm (every pair), the segment size or the
# root: SPMD_ERR_MISMATCH on every rank, naming it (issue 13 point 7).
spmd_test(test_coll_agree SOURCES mp/test_coll_agree.c LABELS mp TIMEOUT 300)
# a rank leaving a failed group says why before its goodbye: the others
# report that cause, not the goodbye.
spmd_test(test_leave_failed SOURCES mp/test_leave_failed.c LABELS mp TIMEOUT 120)
spmd_test(test_coll_unwaited SOURCES mp/test_coll_unwaited.c LABELS mp TIMEOUT 200)

# The seed examples (examples/*.c) run standalone; their exit status is the verdict.
foreach(ex allreduce_ones butterfly collective_asserts)
  add_test(NAME example_${ex} COMMAND ${ex})
  set_tests_properties(example_${ex} PROPERTIES TIMEOUT 60 LABELS "example")
endforeach()
add_test(NAME example_p2p_collectives COMMAND p2p_collectives 4 4099 3)
set_tests_properties(example_p2p_collectives PROPERTIES TIMEOUT 60 LABELS "example")

# Benchmark (not a test): per-algorithm sweep behind the thresholds of select.c.
add_executable(coll_sweep ${PROJECT_SOURCE_DIR}/bench/coll_sweep.c)
target_link_libraries(coll_sweep PRIVATE spmd_static)
set_target_properties(coll_sweep PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bench)

# a few MiB per call with the default segment size (the real piece sizes)
spmd_test(test_coll_big SOURCES mp/test_coll_big.c LABELS mp TIMEOUT 200)

# Cross-memory attach between same-kernel ranks, and the TCP path it
# replaces: the large-buffer tests again with SPMD_CMA=0.
spmd_test(test_cma SOURCES mp/test_cma.c LABELS mp TIMEOUT 120)
spmd_test(test_fdpass SOURCES unit/test_fdpass.c LABELS unit TIMEOUT 60)
add_test(NAME test_coll_big_tcp COMMAND test_coll_big 2 3)
set_tests_properties(test_coll_big_tcp PROPERTIES TIMEOUT 200 LABELS mp ENVIRONMENT "SPMD_CMA=0")
add_test(NAME test_coll_allreduce_tcp COMMAND test_coll_allreduce 2)
set_tests_properties(test_coll_allreduce_tcp PROPERTIES TIMEOUT 200 LABELS mp ENVIRONMENT "SPMD_CMA=0")
