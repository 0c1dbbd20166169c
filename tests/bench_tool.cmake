# spmd-bench itself: every collective checked (#wrong must be 0, or the exit
# status is 1), a few dtypes and ops, CSV output, and the p2p modes.
foreach(op all_reduce broadcast reduce all_gather reduce_scatter all_to_all gather scatter barrier)
  add_test(NAME test_bench_${op} COMMAND $<TARGET_FILE:spmd-bench> --np 3 -o ${op} -b 8 -e 64K -f 8 -n 2 -w 1 -c 1)
  set_tests_properties(test_bench_${op} PROPERTIES TIMEOUT 60 LABELS "bench-tool")
endforeach()
add_test(NAME test_bench_dtypes COMMAND sh -c "set -e; for d in double half bfloat16 int8 int32 int64; do \
  $<TARGET_FILE:spmd-bench> --np 2 -o all_reduce -d $d -r max -b 8 -e 4K -f 16 -n 2 -w 1 -c 1 >/dev/null; done")
add_test(NAME test_bench_csv COMMAND sh -c "f=$(mktemp) && $<TARGET_FILE:spmd-bench> --np 2 -b 8 -e 1K -f 4 -n 2 -w 1 --csv $f --plot $f.png >/dev/null \
  && head -1 $f | grep -q '^op,size_bytes' && [ $(wc -l < $f) -eq 6 ] && { ! command -v gnuplot >/dev/null || [ -s $f.png ]; } && rm -f $f $f.png")
add_test(NAME test_bench_p2p COMMAND sh -c "$<TARGET_FILE:spmd-bench> --np 2 -o pingpong -b 4 -e 1M -f 64 -n 5 -w 1 >/dev/null \
  && $<TARGET_FILE:spmd-bench> --np 2 -o bw -b 4 -e 256K -f 64 -n 2 -w 1 >/dev/null")
set_tests_properties(test_bench_dtypes test_bench_csv test_bench_p2p PROPERTIES TIMEOUT 60 LABELS "bench-tool")
