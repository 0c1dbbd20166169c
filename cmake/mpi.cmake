# cmake/mpi.cmake — SPMD_WITH_MPI=AUTO|ON|OFF: groups over MPI (spmd/mpi.h,
# SPMD_BACKEND=mpi; src/transport/mpi_*.c, src/coll/mpi_native.c,
# src/group/mpi_group.c).  AUTO builds it when an MPI C library is found
# (Debian: libopenmpi-dev), ON fails without one, OFF never builds it: the
# core library and its tests never need MPI.  Included right after spmd_objs
# is declared, so the folders' CMakeLists see SPMD_HAVE_MPI.
set(SPMD_WITH_MPI AUTO CACHE STRING "Build the MPI backend (AUTO, ON, OFF)")
set_property(CACHE SPMD_WITH_MPI PROPERTY STRINGS AUTO ON OFF)
set(SPMD_HAVE_MPI OFF)
set(SPMD_MPI_LINK "")        # what libspmd links (MPI::MPI_C when on)
set(SPMD_PC_REQUIRES "")     # spmd.pc's Requires: (mpi-c when on)
set(SPMD_CONFIG_DEPS "")     # spmdConfig.cmake's extra find_dependency
if(NOT SPMD_WITH_MPI STREQUAL "OFF")
  find_package(MPI COMPONENTS C QUIET)
  if(MPI_C_FOUND)
    set(SPMD_HAVE_MPI ON)
    set(SPMD_MPI_LINK MPI::MPI_C)
    target_link_libraries(spmd_objs PUBLIC MPI::MPI_C)
    target_compile_definitions(spmd_objs PUBLIC SPMD_HAVE_MPI=1)
    set(SPMD_CONFIG_DEPS "find_dependency(MPI COMPONENTS C)")
    find_package(PkgConfig QUIET)
    if(PKG_CONFIG_FOUND)
      foreach(pc mpi-c ompi-c mpich)
        pkg_check_modules(SPMD_MPI_PC_${pc} QUIET ${pc})
        if(SPMD_MPI_PC_${pc}_FOUND)
          set(SPMD_PC_REQUIRES ${pc})
          break()
        endif()
      endforeach()
    endif()
    message(STATUS "MPI backend: building against ${MPI_C_LIBRARIES} (MPI ${MPI_C_VERSION})")
  elseif(SPMD_WITH_MPI STREQUAL "ON")
    message(FATAL_ERROR "SPMD_WITH_MPI=ON but no MPI C library was found (Debian: apt-get install libopenmpi-dev openmpi-bin)")
  else()
    message(STATUS "MPI backend: not built (no MPI C library found)")
  endif()
endif()
