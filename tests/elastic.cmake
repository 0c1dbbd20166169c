# Recovery in place (issue 25, docs/RELIABILITY.md "Recovery in place"): a
# killed rank revokes the group on every path; the survivors shrink and go on.
spmd_test(test_elastic_revoke SOURCES mp/test_elastic_revoke.c LABELS mp fault elastic TIMEOUT 240)
spmd_test(test_elastic_shrink SOURCES mp/test_elastic_shrink.c LABELS mp fault elastic TIMEOUT 400)
spmd_test(test_elastic_grow SOURCES mp/test_elastic_grow.c LABELS mp fault elastic TIMEOUT 300)
# The launcher's store gone (spmdrun's in place: SPMD_STORE_STANDBY): the
# group shrinks on the first stand-in that answers, then on the next.
spmd_test(test_elastic_launcher_store SOURCES mp/test_elastic_launcher_store.c LABELS mp fault elastic TIMEOUT 240)
# spmd_elastic around a training loop: shrink, two killed at once, grow, replace.
spmd_test(test_elastic_train SOURCES mp/test_elastic_train.c LIBS spmdnn LABELS mp fault elastic TIMEOUT 400)
# Deaths inside the recovery (SPMD_TEST_DIE_AT: in the shrink's agreement and
# formation, in the state transfer to survivors and to a joiner) and a rank
# stopped past the heartbeat timeout, resumed and refused.
spmd_test(test_elastic_faults SOURCES mp/test_elastic_faults.c LIBS spmdnn LABELS mp fault elastic TIMEOUT 400)
# The one-page example: a rank killed mid-training (rank 0, the store's host,
# and rank 2), the survivors shrink and finish with bit-identical weights.
foreach(victim 0 2)
  add_test(NAME example_elastic_sgd_${victim} COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/examples/check_elastic_sgd.sh
           ${PROJECT_BINARY_DIR}/examples ${victim})
  set_tests_properties(example_elastic_sgd_${victim} PROPERTIES TIMEOUT 120 LABELS "example;elastic")
endforeach()
# spmdrun --on-failure shrink keeps the survivors running (rank 0 and rank 3 killed).
foreach(victim 0 3)
  add_test(NAME spmdrun_on_failure_shrink_${victim} COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/examples/check_spmdrun_shrink.sh
           $<TARGET_FILE:spmdrun> ${PROJECT_BINARY_DIR}/examples ${victim})
  set_tests_properties(spmdrun_on_failure_shrink_${victim} PROPERTIES TIMEOUT 120 LABELS "launcher;elastic")
endforeach()
add_test(NAME spmdrun_on_failure_shrink_stopped COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/examples/check_spmdrun_shrink.sh
         $<TARGET_FILE:spmdrun> ${PROJECT_BINARY_DIR}/examples 2 stop)
set_tests_properties(spmdrun_on_failure_shrink_stopped PROPERTIES TIMEOUT 120 LABELS "launcher;elastic")
# spmd-train --elastic (tests/elastic/train_elastic.sh): rank 0 killed at step
# 3 (the survivors finish at world 3 after 2 + 8 + 11 steps), ranks 1 and 2
# killed at once (world 2: 2 + 12 + 16 steps); identical replicas after.
add_test(NAME train_elastic_kill_rank0 COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/elastic/train_elastic.sh
         $<TARGET_FILE:spmdrun> $<TARGET_FILE:spmd-train> 0:3 3 21)
add_test(NAME train_elastic_kill_two COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/elastic/train_elastic.sh
         $<TARGET_FILE:spmdrun> $<TARGET_FILE:spmd-train> 1:3,2:3 2 30)
# Rank 1 killed at step 3 and rank 2 dying inside the recovery, while the
# survivors form the new group's mesh; or rank 0, the source, dying after
# sending the survivors its first state: world 2 after 2 + 12 + 16 steps.
add_test(NAME train_elastic_die_in_shrink COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/elastic/train_elastic.sh
         $<TARGET_FILE:spmdrun> $<TARGET_FILE:spmd-train> 1:3 2 30 shrink shrink-form:2@1)
add_test(NAME train_elastic_die_in_transfer COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/elastic/train_elastic.sh
         $<TARGET_FILE:spmdrun> $<TARGET_FILE:spmd-train> 1:3 2 30 shrink elastic-transfer:0@1)
set_tests_properties(train_elastic_kill_rank0 train_elastic_kill_two train_elastic_die_in_shrink
                     train_elastic_die_in_transfer PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS "train;elastic")
# spmdrun --on-failure replace: rank 1 killed at step 3, a new worker joins
# the three survivors at once and the run ends at world 4 after 2 + 6 + 8
# steps, every replica identical; the same with ranks 1 and 2 killed at once.
add_test(NAME train_elastic_replace COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/elastic/train_elastic.sh
         $<TARGET_FILE:spmdrun> $<TARGET_FILE:spmd-train> 1:3 4 16 replace)
add_test(NAME train_elastic_replace_two COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/elastic/train_elastic.sh
         $<TARGET_FILE:spmdrun> $<TARGET_FILE:spmd-train> 1:3,2:3 4 16 replace)
set_tests_properties(train_elastic_replace train_elastic_replace_two PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS "train;elastic;launcher")
# The same across two network namespaces (two spmdruns, --nnodes 2, TCP
# between them): rank 0 killed (world 3); ranks 1 and 2, one on each side,
# killed at once (world 2).
add_test(NAME train_elastic_netns_rank0 COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/elastic/train_elastic_netns.sh
         $<TARGET_FILE:spmdrun> $<TARGET_FILE:spmd-train> 0:3 3 21)
add_test(NAME train_elastic_netns_two COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/elastic/train_elastic_netns.sh
         $<TARGET_FILE:spmdrun> $<TARGET_FILE:spmd-train> 1:3,2:3 2 30)
set_tests_properties(train_elastic_netns_rank0 train_elastic_netns_two PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                     RUN_SERIAL TRUE LABELS "train;elastic;netns")
# A worker stopped past the heartbeat timeout, resumed by the others: it is
# told it was excluded and exits with SPMD_EXIT_EXCLUDED, which spmdrun
# --on-failure shrink counts as lost; the others finish identical.
add_executable(elastic_stop_worker elastic/stop_worker.c)
target_link_libraries(elastic_stop_worker PRIVATE spmd_static)
target_include_directories(elastic_stop_worker PRIVATE ${PROJECT_SOURCE_DIR}/src)
add_test(NAME spmdrun_on_failure_excluded COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/elastic/stopped.sh
         $<TARGET_FILE:spmdrun> $<TARGET_FILE:elastic_stop_worker>)
set_tests_properties(spmdrun_on_failure_excluded PROPERTIES TIMEOUT 120 LABELS "launcher;elastic")
# --elastic --zero: ZeRO-1 shards re-dealt over the shrunk and the grown
# group end where plain --elastic does, to the bit (rank 1 killed; ranks 0
# and 2 at once; rank 1 replaced; rank 1 killed before the parameters'
# all_gather, so the survivors undo their shards' update); a shard's owner
# and buddy killed at once
# (ranks 1 and 2) end the --zero run with every survivor naming it.
foreach(c "1:3;shrink" "0:3,2:3;shrink" "1:3;replace" "1:3,2:3;shrink;1" "1:3:gather;shrink")
  string(REGEX REPLACE "[:,;]" "_" n "${c}")
  add_test(NAME train_elastic_zero_${n} COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/elastic/train_elastic_zero.sh
           $<TARGET_FILE:spmdrun> $<TARGET_FILE:spmd-train> ${c})
  set_tests_properties(train_elastic_zero_${n} PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS "train;elastic;launcher")
endforeach()
# spmdrun --nnodes MIN:MAX in place across two network namespaces
# (tests/elastic/nnodes_netns.sh): a whole node SIGKILLed, the others finish;
# a node started mid-run joins, world 2 -> 4; a loss below MIN ends every
# remaining node with an error naming the lost one; --on-failure replace: a
# whole node SIGKILLed and a new one started in its place, back at world 4;
# the node hosting the rendezvous store SIGKILLed: the store moves, the
# others finish (losehost), or, below MIN, end naming it (belowhost).
foreach(mode lose join below replace losehost belowhost)
  add_test(NAME spmdrun_nnodes_netns_${mode} COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/elastic/nnodes_netns.sh
           $<TARGET_FILE:spmdrun> $<TARGET_FILE:spmd-train> ${mode})
  set_tests_properties(spmdrun_nnodes_netns_${mode} PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77 RUN_SERIAL TRUE
                       LABELS "train;elastic;netns;launcher")
endforeach()
