# Tests of the simulated GPU driver. They call the simulated libcuda.so.1 / libnvidia-ml.so.1
# directly (found through BUILD_RPATH) and use the simgpu core for UUIDs and cleanup.
#
# Registered like gpufrac_test() does, plus TEST_PREFIX "simgpu." so that `ctest -R simgpu`
# selects them (gpufrac_test has no prefix option).
add_executable(simgpu_test
  integration/simgpu_device_test.cc
  integration/simgpu_engine_test.cc
  integration/simgpu_event_test.cc
  integration/simgpu_graph_test.cc
  integration/simgpu_launch_test.cc
  integration/simgpu_memory_test.cc
  integration/simgpu_nvml_test.cc
  integration/simgpu_proc_address_test.cc
  integration/simgpu_process_test.cc
  integration/simgpu_test_util.cc
  integration/simgpu_vmm_test.cc)
target_link_libraries(simgpu_test PRIVATE simgpu_cuda simgpu_nvml simgpu_core gpufrac_gpu ${CMAKE_DL_LIBS}
                      GTest::gtest GTest::gtest_main Threads::Threads)
target_compile_definitions(simgpu_test PRIVATE
  GPUFRAC_BUILD_DIR="${CMAKE_BINARY_DIR}"
  GPUFRAC_SIMGPU_DIR="${GPUFRAC_SIMGPU_DIR}"
  GPUFRAC_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
set_target_properties(simgpu_test PROPERTIES BUILD_RPATH ${GPUFRAC_SIMGPU_DIR})
gtest_discover_tests(simgpu_test TEST_PREFIX "simgpu." PROPERTIES LABELS integration
                     FIXTURES_REQUIRED suite DISCOVERY_TIMEOUT 60)
