# Tests of GPU health: the simulated NVML's events, lost GPUs and fault-injection controls, and
# gpu::HealthMonitor against them (prefixed "simgpu." so that `ctest -R simgpu` selects them),
# plus the monitor's XID tables as a unit test.
gpufrac_test(gpu_health_xid_test unit SOURCES unit/gpu_health_xid_test.cc LIBS gpufrac_gpu)

add_executable(simgpu_health_test
  integration/simgpu_health_test.cc
  integration/simgpu_test_util.cc)
target_link_libraries(simgpu_health_test PRIVATE gpufrac_gpu simgpu_cuda simgpu_nvml simgpu_core
                      GTest::gtest GTest::gtest_main Threads::Threads)
target_compile_definitions(simgpu_health_test PRIVATE
  GPUFRAC_BUILD_DIR="${CMAKE_BINARY_DIR}"
  GPUFRAC_SIMGPU_DIR="${GPUFRAC_SIMGPU_DIR}"
  GPUFRAC_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
set_target_properties(simgpu_health_test PROPERTIES BUILD_RPATH ${GPUFRAC_SIMGPU_DIR})
gtest_discover_tests(simgpu_health_test TEST_PREFIX "simgpu." PROPERTIES LABELS integration
                     FIXTURES_REQUIRED suite DISCOVERY_TIMEOUT 60)
