# src/coll/algos.cmake — collective algorithms and the selection table
# (included by src/coll/CMakeLists.txt).
target_sources(spmd_objs PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/pattern.c
  ${CMAKE_CURRENT_LIST_DIR}/trial.c
  ${CMAKE_CURRENT_LIST_DIR}/allreduce_ring.c
  ${CMAKE_CURRENT_LIST_DIR}/allreduce_rhd.c
  ${CMAKE_CURRENT_LIST_DIR}/allreduce_rd.c
  ${CMAKE_CURRENT_LIST_DIR}/allreduce_naive.c
  ${CMAKE_CURRENT_LIST_DIR}/allreduce_butterfly.c
  ${CMAKE_CURRENT_LIST_DIR}/bcast_tree.c
  ${CMAKE_CURRENT_LIST_DIR}/bcast_scatter_ring.c
  ${CMAKE_CURRENT_LIST_DIR}/reduce_tree.c
  ${CMAKE_CURRENT_LIST_DIR}/gather_linear.c
  ${CMAKE_CURRENT_LIST_DIR}/gather_tree.c
  ${CMAKE_CURRENT_LIST_DIR}/scatter_linear.c
  ${CMAKE_CURRENT_LIST_DIR}/scatter_tree.c
  ${CMAKE_CURRENT_LIST_DIR}/allgather_ring.c
  ${CMAKE_CURRENT_LIST_DIR}/allgather_bruck.c
  ${CMAKE_CURRENT_LIST_DIR}/reduce_scatter_ring.c
  ${CMAKE_CURRENT_LIST_DIR}/reduce_scatter_direct.c
  ${CMAKE_CURRENT_LIST_DIR}/alltoall_pairwise.c
  ${CMAKE_CURRENT_LIST_DIR}/alltoall_linear.c
  ${CMAKE_CURRENT_LIST_DIR}/barrier_dissemination.c
  ${CMAKE_CURRENT_LIST_DIR}/allreduce_shm.c
  ${CMAKE_CURRENT_LIST_DIR}/allreduce_cma.c
  ${CMAKE_CURRENT_LIST_DIR}/allreduce_hier.c
  ${CMAKE_CURRENT_LIST_DIR}/bcast_shm.c
  ${CMAKE_CURRENT_LIST_DIR}/reduce_shm.c
  ${CMAKE_CURRENT_LIST_DIR}/allgather_shm.c
  ${CMAKE_CURRENT_LIST_DIR}/reduce_scatter_shm.c
  ${CMAKE_CURRENT_LIST_DIR}/barrier_shm.c
  ${CMAKE_CURRENT_LIST_DIR}/gather_shm.c
  ${CMAKE_CURRENT_LIST_DIR}/alltoall_shm.c
  ${CMAKE_CURRENT_LIST_DIR}/select.c
  ${CMAKE_CURRENT_LIST_DIR}/agree.c
  ${CMAKE_CURRENT_LIST_DIR}/ctx.c
)
if(SPMD_HAVE_MPI)
  target_sources(spmd_objs PRIVATE ${CMAKE_CURRENT_LIST_DIR}/mpi_native.c)
endif()
