# MPS on the simulated GPU: the nvidia-cuda-mps-control / nvidia-cuda-mps-server stand-ins and
# CUDA clients (mps_probe), without gpufrac's limiter. The integration tests measure time, so
# they run alone (RUN_SERIAL); prefixed "simgpu." so that `ctest -R simgpu` selects them.
gpufrac_test(simgpu_mps_settings_test unit SOURCES unit/simgpu_mps_settings_test.cc
             LIBS simgpu_core)

# Linked to the driver stand-ins without an RPATH, like cuda_probe: LD_LIBRARY_PATH picks them.
add_executable(mps_probe progs/mps_probe.cc)
target_include_directories(mps_probe PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(mps_probe PRIVATE simgpu_cuda simgpu_nvml)
set_target_properties(mps_probe PROPERTIES SKIP_BUILD_RPATH ON)

add_executable(simgpu_mps_test integration/simgpu_mps_test.cc)
target_link_libraries(simgpu_mps_test PRIVATE gpufrac_test_harness gpufrac_machine_mps GTest::gtest
                      GTest::gtest_main Threads::Threads)
target_compile_definitions(simgpu_mps_test PRIVATE
  GPUFRAC_BUILD_DIR="${CMAKE_BINARY_DIR}"
  GPUFRAC_SIMGPU_DIR="${GPUFRAC_SIMGPU_DIR}"
  GPUFRAC_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
add_dependencies(simgpu_mps_test mps_probe cuda_probe simgpu_mps_control simgpu_mps_server
                 simgpu_cuda simgpu_nvml)
gtest_discover_tests(simgpu_mps_test TEST_PREFIX "simgpu." PROPERTIES LABELS integration
                     FIXTURES_REQUIRED suite RUN_SERIAL TRUE DISCOVERY_TIMEOUT 60)
