# Installation: headers, shared + static libraries, tools, pkg-config file and
# a CMake package config so other projects use find_package(spmd) or
# pkg-config --cflags --libs spmd.
include(CMakePackageConfigHelpers)
# spmd/mpi.h only with the MPI backend (it includes mpi.h)
if(SPMD_HAVE_MPI)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/spmd DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
else()
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/spmd DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} PATTERN mpi.h EXCLUDE)
endif()
# The training stack's archive joins the export set: find_package(spmd) then
# target_link_libraries(app spmd::spmdnn) brings libspmd, OpenBLAS, zlib, libm.
install(TARGETS spmd spmd_static spmdnn EXPORT spmdTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT spmdTargets NAMESPACE spmd:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/spmd)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/spmdConfig.cmake.in
  ${PROJECT_BINARY_DIR}/spmdConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/spmd)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/spmdConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/spmdConfig.cmake ${PROJECT_BINARY_DIR}/spmdConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/spmd)
# spmd.pc finds its prefix from its own location, so the installed tree can
# be moved (and `cmake --install --prefix` works).
file(RELATIVE_PATH SPMD_PC_TO_PREFIX "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
configure_file(${PROJECT_SOURCE_DIR}/cmake/spmd.pc.in ${PROJECT_BINARY_DIR}/spmd.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/spmd.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
# pkg-config --libs spmdnn: the archive, then what it needs (libspmd, OpenBLAS,
# zlib, libm).
configure_file(${PROJECT_SOURCE_DIR}/cmake/spmdnn.pc.in ${PROJECT_BINARY_DIR}/spmdnn.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/spmdnn.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
# Installed programs find libspmd.so next to them ($ORIGIN/../lib: a moved
# prefix keeps working) without LD_LIBRARY_PATH or ldconfig.
foreach(tool spmd-bench spmdrun spmd-train)
  if(TARGET ${tool})
    set_target_properties(${tool} PROPERTIES INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
  endif()
endforeach()
# Into a prefix the dynamic linker searches (/usr/local/lib), as root: refresh
# its cache, so programs built with -lspmd start at once (as `make install` of
# most libraries does).
install(CODE [[
  if(NOT "$ENV{DESTDIR}" STREQUAL "" OR NOT EXISTS /sbin/ldconfig OR
     NOT CMAKE_INSTALL_PREFIX MATCHES "^/usr(/local)?/?$")
    return()
  endif()
  execute_process(COMMAND id -u OUTPUT_VARIABLE uid OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(uid STREQUAL "0")
    execute_process(COMMAND /sbin/ldconfig)
  endif()
]])
