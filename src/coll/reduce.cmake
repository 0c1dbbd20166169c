# Reduce kernels (included by src/coll/CMakeLists.txt).
# The AVX2/AVX-512 files mark their own functions with target attributes, so
# no file needs ISA compile flags and the library stays baseline x86-64.
target_sources(spmd_objs PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/half.c
  ${CMAKE_CURRENT_LIST_DIR}/reduce_scalar.c
  ${CMAKE_CURRENT_LIST_DIR}/reduce_avx2.c
  ${CMAKE_CURRENT_LIST_DIR}/reduce_avx512.c
  ${CMAKE_CURRENT_LIST_DIR}/reduce_dispatch.c)
