# Collectives (src/coll/: patterns, algorithms, selection, public API) and the
# seed examples that use them.
spmd_test(test_pattern SOURCES unit/test_pattern.c LABELS unit TIMEOUT 30)

# all_reduce: full dtype x op x algorithm matrix at worlds 1-4, a reduced one
# at 5, 7, 8, a single case at 16 (one ctest entry each so -j2 spreads them).
spmd_test(test_coll_allreduce SOURCES mp/test_coll_allreduce.c ARGS 1 2 LABELS mp TIMEOUT 200)
foreach(w 3 4 5 7 8 16)
  add_test(NAME test_coll_allreduce_w${w} COMMAND test_coll_allreduce ${w})
  set_tests_properties(test_coll_allreduce_w${w} PROPERTIES TIMEOUT 200 LABELS mp)
endforeach()
