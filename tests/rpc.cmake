# RPC (src/rpc): every API call at worlds 1-4, failures, malformed frames.
spmd_test(test_rpc SOURCES mp/test_rpc.c LABELS mp rpc TIMEOUT 180)
spmd_test(test_rpc_failure SOURCES mp/test_rpc_failure.c LABELS mp rpc TIMEOUT 120)
# The RPC seed tutorials under spmdrun at a small size (77: dataset missing).
# Their time is decompressing Fashion-MNIST in every rank and the CNN's
# kernels (rpc_pipeline: 1.2 s of CPU, 13 s under ThreadSanitizer, which took
# 130 s of a machine at load 20), so the hang guard is generous.
foreach(ex "rpc_batch;4;--steps;20" "rpc_rl;3;--episodes;4" "rpc_param_server;3;--steps;40"
           "rpc_pipeline;3;--steps;8;--micro;2" "rpc_ddp;3;--steps;30")
  list(GET ex 0 name)
  list(GET ex 1 np)
  list(SUBLIST ex 2 -1 args)
  add_test(NAME example_${name} COMMAND $<TARGET_FILE:spmdrun> --standalone --nproc-per-node ${np} $<TARGET_FILE:${name}> ${args})
  set_tests_properties(example_${name} PROPERTIES TIMEOUT 300 LABELS "example;rpc" SKIP_RETURN_CODE 77)
endforeach()
# Distributed autograd + optimizer: the split CNN against the whole CNN (1e-5).
spmd_test(test_dist_autograd SOURCES mp/test_dist_autograd.c LIBS spmdnn LABELS mp rpc nn TIMEOUT 300)
# spmd-bench -o rpc runs end to end (figures are for docs/PERFORMANCE.md, not checked).
add_test(NAME test_bench_rpc COMMAND sh -c "$<TARGET_FILE:spmd-bench> -o rpc -b 4 -e 64K -n 5 | grep -q 'start .* shutdown'")
set_tests_properties(test_bench_rpc PROPERTIES TIMEOUT 60 LABELS "bench-tool;rpc")
# RPC traffic leaves no ring-polling count behind (a leak hung spmd-bench -o rpc),
# and a spin off the core between every few looks still ends by its budget
# (forgiving every preemption made it endless under load: issue 28).
spmd_test(test_rpc_spin SOURCES mp/test_rpc_spin.c LABELS mp rpc TIMEOUT 120)
