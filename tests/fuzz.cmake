# Fuzz harnesses (tests/fuzz/<name>.c defining LLVMFuzzerTestOneInput).
#
# Every build: the harness compiled with a replay main (SPMD_FUZZ_REPLAY_MAIN)
# that runs it over deterministic pseudo-random and mutated valid inputs, as a
# normal test named <name>_replay.
# -DSPMD_FUZZ=ON with clang: also a real libFuzzer binary <name> in tests/,
# built with the parser's own sources so they carry coverage instrumentation:
#   ./tests/fuzz_store_wire -max_total_time=60 -max_len=4096 corpus_dir/
function(spmd_fuzzer name)
  cmake_parse_arguments(F "" "" "PARSER_SOURCES" ${ARGN})
  spmd_test(${name}_replay SOURCES fuzz/${name}.c LABELS unit fuzz TIMEOUT 60)
  target_compile_definitions(${name}_replay PRIVATE SPMD_FUZZ_REPLAY_MAIN=1)
  if(SPMD_FUZZ)
    if(CMAKE_C_COMPILER_ID MATCHES "Clang")
      add_executable(${name} fuzz/${name}.c ${F_PARSER_SOURCES})
      target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src
                                 ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/tests)
      target_compile_options(${name} PRIVATE -fsanitize=fuzzer,address,undefined
                             -fno-sanitize-recover=undefined)
      target_link_options(${name} PRIVATE -fsanitize=fuzzer,address,undefined)
      set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests)
    else()
      message(WARNING "SPMD_FUZZ=ON needs clang (CC=clang); ${name} is built as a replay test only")
    endif()
  endif()
endfunction()

spmd_fuzzer(fuzz_store_wire PARSER_SOURCES
  ${PROJECT_SOURCE_DIR}/src/store/wire.c ${PROJECT_SOURCE_DIR}/src/common/error.c)

# The authenticated handshakes (store and mesh), with the shared replay main.
spmd_test(fuzz_handshake_replay SOURCES fuzz/fuzz_handshake.c fuzz/replay_main_data.c
          LABELS unit fuzz TIMEOUT 120)
if(SPMD_FUZZ AND CMAKE_C_COMPILER_ID MATCHES "Clang")
  add_executable(fuzz_handshake fuzz/fuzz_handshake.c ${PROJECT_SOURCE_DIR}/src/store/handshake.c
                 ${PROJECT_SOURCE_DIR}/src/store/wire.c ${PROJECT_SOURCE_DIR}/src/transport/hello.c
                 ${PROJECT_SOURCE_DIR}/src/auth/proof.c ${PROJECT_SOURCE_DIR}/src/auth/secret.c
                 ${PROJECT_SOURCE_DIR}/src/common/error.c ${PROJECT_SOURCE_DIR}/src/common/log.c
                 ${PROJECT_SOURCE_DIR}/src/common/clock.c)
  target_include_directories(fuzz_handshake PRIVATE ${PROJECT_SOURCE_DIR}/src
                             ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/tests)
  target_compile_options(fuzz_handshake PRIVATE -fsanitize=fuzzer,address,undefined
                         -fno-sanitize-recover=undefined)
  target_link_options(fuzz_handshake PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_libraries(fuzz_handshake PRIVATE OpenSSL::Crypto Threads::Threads)
  set_target_properties(fuzz_handshake PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests)
endif()

# The flight-record parser spmdrun runs on the workers' records (issue 13),
# with the shared replay main.
spmd_test(fuzz_flight_record_replay SOURCES fuzz/fuzz_flight_record.c fuzz/replay_main_data.c
          LABELS unit fuzz TIMEOUT 120)
if(SPMD_FUZZ AND CMAKE_C_COMPILER_ID MATCHES "Clang")
  add_executable(fuzz_flight_record fuzz/fuzz_flight_record.c ${PROJECT_SOURCE_DIR}/src/group/flight_text.c
                 ${PROJECT_SOURCE_DIR}/src/group/flight_diag.c ${PROJECT_SOURCE_DIR}/src/common/error.c)
  target_include_directories(fuzz_flight_record PRIVATE ${PROJECT_SOURCE_DIR}/src
                             ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/tests)
  target_compile_options(fuzz_flight_record PRIVATE -fsanitize=fuzzer,address,undefined
                         -fno-sanitize-recover=undefined)
  target_link_options(fuzz_flight_record PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_libraries(fuzz_flight_record PRIVATE m)
  set_target_properties(fuzz_flight_record PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests)
endif()

# The record layer of encrypted links (SPMD_ENCRYPT=1): bytes from the network
# through a socket pair into a sealed path.
spmd_test(fuzz_sealed_replay SOURCES fuzz/fuzz_sealed.c fuzz/replay_main_data.c LABELS unit fuzz TIMEOUT 120)
if(SPMD_FUZZ AND CMAKE_C_COMPILER_ID MATCHES "Clang")
  add_executable(fuzz_sealed fuzz/fuzz_sealed.c ${PROJECT_SOURCE_DIR}/src/transport/path_sealed.c
                 ${PROJECT_SOURCE_DIR}/src/auth/seal.c ${PROJECT_SOURCE_DIR}/src/common/error.c
                 ${PROJECT_SOURCE_DIR}/src/common/log.c ${PROJECT_SOURCE_DIR}/src/common/clock.c)
  target_include_directories(fuzz_sealed PRIVATE ${PROJECT_SOURCE_DIR}/src
                             ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/tests)
  target_compile_options(fuzz_sealed PRIVATE -fsanitize=fuzzer,address,undefined
                         -fno-sanitize-recover=undefined)
  target_link_options(fuzz_sealed PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_libraries(fuzz_sealed PRIVATE OpenSSL::Crypto Threads::Threads)
  set_target_properties(fuzz_sealed PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests)
endif()

# The Slurm hostlist expander (SLURM_JOB_NODELIST).
spmd_fuzzer(fuzz_hostlist PARSER_SOURCES
  ${PROJECT_SOURCE_DIR}/src/common/hostlist.c ${PROJECT_SOURCE_DIR}/src/common/error.c)
target_sources(fuzz_hostlist_replay PRIVATE fuzz/replay_main_data.c)
