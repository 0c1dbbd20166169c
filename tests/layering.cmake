# The include graph between src/ folders, tools/ and examples/ follows docs/ARCHITECTURE.md's layers.
find_program(SPMD_PYTHON3 python3)
if(SPMD_PYTHON3)
  add_test(NAME test_layering COMMAND ${SPMD_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/unit/check_layering.py ${PROJECT_SOURCE_DIR})
  set_tests_properties(test_layering PROPERTIES TIMEOUT 30 LABELS unit)
endif()
