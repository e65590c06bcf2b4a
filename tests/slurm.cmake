# Tests of gpufrac on Slurm: the plugin's decisions alone, and a real single-node Slurm
# (munged, slurmctld, slurmd from Debian's packages) running jobs through the plugin.
gpufrac_test(slurm_step_request_test unit SOURCES unit/slurm_step_request_test.cc
             LIBS gpufrac_slurm)
gpufrac_test(slurm_node_state_test unit SOURCES unit/slurm_node_state_test.cc LIBS gpufrac_slurm)
gpufrac_test(slurm_extern_step_test unit SOURCES unit/slurm_extern_step_test.cc LIBS gpufrac_slurm)
gpufrac_test(slurm_booked_share_test unit SOURCES unit/slurm_booked_share_test.cc
             LIBS gpufrac_slurm)

# The real cluster: needs root and Debian's slurmctld, slurmd, slurm-client and munge
# (scripts/install-deps.sh installs them). One CTest test for the whole binary, so that its
# tests share one cluster (starting one takes seconds) instead of one each.
if(TARGET gpufrac_spank)
  add_executable(slurm_test integration/slurm_test.cc)
  target_link_libraries(slurm_test PRIVATE GTest::gtest GTest::gtest_main Threads::Threads)
  target_compile_definitions(slurm_test PRIVATE
    GPUFRAC_BUILD_DIR="${CMAKE_BINARY_DIR}"
    GPUFRAC_SIMGPU_DIR="${GPUFRAC_SIMGPU_DIR}"
    GPUFRAC_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  add_dependencies(slurm_test gpufrac_spank gpufrac cuda_probe simgpu_cuda simgpu_nvml)
  add_test(NAME slurm_test COMMAND slurm_test)
  set_tests_properties(slurm_test PROPERTIES LABELS integration TIMEOUT 300)
endif()
