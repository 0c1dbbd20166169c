# The include graph between src/ folders, tools/ and examples/ follows docs/ARCHITECTURE.md's layers.
find_program(SPMD_PYTHON3 python3)
if(SPMD_PYTHON3)
  add_test(NAME test_layering COMMAND ${SPMD_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/unit/check_layering.py ${PROJECT_SOURCE_DIR})
  set_tests_properties(test_layering PROPERTIES TIMEOUT 30 LABELS unit)
endif()
# The same rule for calls: the symbols each src/ folder's objects need (nm) must
# be defined in that folder or one below it (tests/unit/check_layering.py --objects).
if(SPMD_PYTHON3)
  add_test(NAME test_layering_calls COMMAND ${SPMD_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/unit/check_layering.py
           ${PROJECT_SOURCE_DIR} --objects "$<TARGET_OBJECTS:spmd_objs>;$<TARGET_OBJECTS:spmdnn>")
  set_tests_properties(test_layering_calls PROPERTIES TIMEOUT 60 LABELS unit)
endif()
