# Tests of the simulated GPU's MIG (NVML calls, and cuda_probe runs in MIG devices) and of
# gpufrac's NVML MIG client (gpu/mig_device) against the simulated NVML. Prefixed "simgpu." so
# that `ctest -R simgpu` selects them.
add_executable(simgpu_mig_test
  integration/simgpu_mig_test.cc
  integration/simgpu_test_util.cc)
target_link_libraries(simgpu_mig_test PRIVATE simgpu_cuda simgpu_nvml simgpu_core
                      gpufrac_test_harness ${CMAKE_DL_LIBS} GTest::gtest GTest::gtest_main
                      Threads::Threads)
target_compile_definitions(simgpu_mig_test PRIVATE
  GPUFRAC_BUILD_DIR="${CMAKE_BINARY_DIR}"
  GPUFRAC_SIMGPU_DIR="${GPUFRAC_SIMGPU_DIR}"
  GPUFRAC_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
set_target_properties(simgpu_mig_test PROPERTIES BUILD_RPATH ${GPUFRAC_SIMGPU_DIR})
add_dependencies(simgpu_mig_test cuda_probe)
gtest_discover_tests(simgpu_mig_test TEST_PREFIX "simgpu." PROPERTIES LABELS integration
                     FIXTURES_REQUIRED suite DISCOVERY_TIMEOUT 60)

add_executable(gpu_mig_device_test
  integration/gpu_mig_device_test.cc
  integration/simgpu_test_util.cc)
target_link_libraries(gpu_mig_device_test PRIVATE gpufrac_gpu simgpu_cuda simgpu_nvml simgpu_core
                      gpufrac_test_harness GTest::gtest GTest::gtest_main Threads::Threads)
target_compile_definitions(gpu_mig_device_test PRIVATE
  GPUFRAC_BUILD_DIR="${CMAKE_BINARY_DIR}"
  GPUFRAC_SIMGPU_DIR="${GPUFRAC_SIMGPU_DIR}"
  GPUFRAC_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
set_target_properties(gpu_mig_device_test PROPERTIES BUILD_RPATH ${GPUFRAC_SIMGPU_DIR})
add_dependencies(gpu_mig_device_test cuda_probe)
gtest_discover_tests(gpu_mig_device_test TEST_PREFIX "simgpu." PROPERTIES LABELS integration
                     FIXTURES_REQUIRED suite DISCOVERY_TIMEOUT 60)
