add_test(NAME test_install COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/install/test_install.sh ${PROJECT_BINARY_DIR}
         ${CMAKE_CURRENT_SOURCE_DIR}/install ${SPMD_HAVE_MPI})
set_tests_properties(test_install PROPERTIES TIMEOUT 120 LABELS "install;no-asan;no-tsan" RUN_SERIAL TRUE)
