# Every C code block of README.md, docs/*.md and the public headers' comments
# compiles (issue 12, point 13).
add_test(NAME test_doc_code_blocks COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/docs/compile_doc_blocks.py
         ${CMAKE_C_COMPILER} ${PROJECT_SOURCE_DIR})
set_tests_properties(test_doc_code_blocks PROPERTIES TIMEOUT 60 LABELS "unit;docs")
