# The libFuzzer targets of tests/fuzz/, built by clang in a configuration of their own (build/fuzz,
# GPUFRAC_FUZZ=ON: see tests/fuzz/CMakeLists.txt) and each run as a test labelled fuzz for
# GPUFRAC_FUZZ_SECONDS by tests/fuzz/run.sh, which fails on anything found (crash, undefined
# behaviour, leak, hang, out of memory). Their seeds, regression inputs included, run first.
include(ExternalProject)

set(GPUFRAC_FUZZ_TESTS AUTO CACHE STRING
    "Build and run the fuzz targets: ON, OFF, or AUTO (when clang with libFuzzer is installed)")
set_property(CACHE GPUFRAC_FUZZ_TESTS PROPERTY STRINGS AUTO ON OFF)
set(GPUFRAC_FUZZ_SECONDS 10 CACHE STRING "How long the test suite runs each fuzz target")
if(GPUFRAC_FUZZ_TESTS STREQUAL "OFF")
  return()
endif()

# Debian 12's clang is clang-14; libFuzzer's runtime is a package of its own (libclang-rt-14-dev),
# so link a trivial target once to know it is there.
find_program(GPUFRAC_FUZZ_CXX NAMES clang++-14 clang++)
find_program(GPUFRAC_FUZZ_CC NAMES clang-14 clang)
if(GPUFRAC_FUZZ_CXX AND GPUFRAC_FUZZ_CC AND NOT GPUFRAC_FUZZ_LINKS)
  set(check_dir ${CMAKE_BINARY_DIR}/fuzz-check)
  file(WRITE ${check_dir}/check.cc
       "#include <cstddef>\n#include <cstdint>\n"
       "extern \"C\" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n")
  execute_process(COMMAND ${GPUFRAC_FUZZ_CXX} -fsanitize=fuzzer,address,undefined check.cc
                          -o check
                  WORKING_DIRECTORY ${check_dir} RESULT_VARIABLE check_rc
                  OUTPUT_QUIET ERROR_QUIET)
  if(check_rc EQUAL 0)
    set(GPUFRAC_FUZZ_LINKS TRUE CACHE INTERNAL "clang links libFuzzer targets")
  endif()
endif()
if(NOT GPUFRAC_FUZZ_LINKS)
  string(CONCAT why "clang with libFuzzer was not found (Debian 12: apt-get install clang-14 "
         "libclang-rt-14-dev, as scripts/install-deps.sh does)")
  if(GPUFRAC_FUZZ_TESTS STREQUAL "ON")
    message(FATAL_ERROR "GPUFRAC_FUZZ_TESTS=ON, but ${why}")
  endif()
  message(WARNING "The fuzz targets are not built or run: ${why}")
  return()
endif()

ExternalProject_Add(gpufrac_fuzz
  SOURCE_DIR ${PROJECT_SOURCE_DIR}
  BINARY_DIR ${CMAKE_BINARY_DIR}/fuzz
  PREFIX ${CMAKE_BINARY_DIR}/fuzz/external  # Its steps' stamps: gone with build/fuzz.
  CMAKE_ARGS -DGPUFRAC_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
             -DCMAKE_CXX_COMPILER=${GPUFRAC_FUZZ_CXX} -DCMAKE_C_COMPILER=${GPUFRAC_FUZZ_CC}
  INSTALL_COMMAND ""
  BUILD_ALWAYS TRUE)  # Its own make decides what changed.

file(GLOB fuzz_sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/fuzz/fuzz_*.cc)
foreach(source IN LISTS fuzz_sources)
  get_filename_component(name ${source} NAME_WE)
  string(REGEX REPLACE "^fuzz_" "" target ${name})
  add_test(NAME ${name}
           COMMAND ${PROJECT_SOURCE_DIR}/tests/fuzz/run.sh -n -b ${CMAKE_BINARY_DIR}/fuzz
                   -t ${GPUFRAC_FUZZ_SECONDS} ${target})
  math(EXPR limit "${GPUFRAC_FUZZ_SECONDS} + 120")
  set_tests_properties(${name} PROPERTIES LABELS fuzz TIMEOUT ${limit})
endforeach()
