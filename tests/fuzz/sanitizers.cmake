# The fuzz configuration's flags (GPUFRAC_FUZZ=ON): every library a fuzz target links is built
# with libFuzzer's coverage, AddressSanitizer and UndefinedBehaviorSanitizer, and undefined
# behaviour stops the run like a crash, so a finding anywhere below a target is reported.
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "GPUFRAC_FUZZ needs clang with libFuzzer (Debian 12: clang-14 and "
                      "libclang-rt-14-dev); configure with -DCMAKE_CXX_COMPILER=clang++-14 "
                      "-DCMAKE_C_COMPILER=clang-14")
endif()
add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all
                    -fno-omit-frame-pointer)
add_link_options(-fsanitize=address,undefined)
