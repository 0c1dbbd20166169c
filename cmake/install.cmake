# Installation: headers, shared + static libraries, tools, pkg-config file and
# a CMake package config so other projects use find_package(spmd) or
# pkg-config --cflags --libs spmd.
include(CMakePackageConfigHelpers)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/spmd DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS spmd spmd_static EXPORT spmdTargets
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
# The training stack's archive (link with -lspmdnn -lspmd -lopenblas -lz -lm).
install(TARGETS spmdnn ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
