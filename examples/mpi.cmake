# Examples of groups over MPI (examples/mpi/*.c, built with the MPI backend,
# SPMD_WITH_MPI): programs that own MPI and hand spmd their communicators.
if(SPMD_HAVE_MPI)
  file(GLOB SPMD_MPI_EXAMPLES ${CMAKE_CURRENT_LIST_DIR}/mpi/*.c)
  foreach(src ${SPMD_MPI_EXAMPLES})
    get_filename_component(name ${src} NAME_WE)
    add_executable(${name} ${src})
    target_link_libraries(${name} PRIVATE spmdnn)
    set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/examples)
  endforeach()
endif()
