# Every C code block of README.md, docs/*.md and the public headers' comments
# compiles (issue 12, point 13).
# (blocks using spmd/mpi.h need MPI's headers: given when the MPI backend is built)
set(SPMD_DOC_MPI_FLAGS "")
if(SPMD_HAVE_MPI)
  foreach(d ${MPI_C_INCLUDE_DIRS})
    list(APPEND SPMD_DOC_MPI_FLAGS "-I${d}")
  endforeach()
endif()
add_test(NAME test_doc_code_blocks COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/docs/compile_doc_blocks.py
         ${CMAKE_C_COMPILER} ${PROJECT_SOURCE_DIR} ${SPMD_DOC_MPI_FLAGS})
set_tests_properties(test_doc_code_blocks PROPERTIES TIMEOUT 60 LABELS "unit;docs")
# The docs stand alone: no build-machine or ../shared paths, every relative
# link resolves inside the repository (issue 12, point 15).
add_test(NAME test_doc_links COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/docs/check_doc_links.py ${PROJECT_SOURCE_DIR})
set_tests_properties(test_doc_links PROPERTIES TIMEOUT 60 LABELS "unit;docs")
