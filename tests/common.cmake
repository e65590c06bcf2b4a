# Tests of the common module (units, Status) and gpu device discovery.
gpufrac_test(common_status_test unit SOURCES unit/common_status_test.cc LIBS gpufrac_common)
gpufrac_test(common_units_test unit SOURCES unit/common_units_test.cc LIBS gpufrac_common)
gpufrac_test(common_log_test unit SOURCES unit/common_log_test.cc LIBS gpufrac_common)
gpufrac_test(common_text_test unit SOURCES unit/common_text_test.cc LIBS gpufrac_common)
gpufrac_test(common_metrics_test unit SOURCES unit/common_metrics_test.cc LIBS gpufrac_common)

# A stand-in NVML with injectable failures, so ListDevices' error paths run without a GPU. Built
# under a name and directory nothing else looks in.
add_library(gpufrac_test_fake_nvml SHARED unit/gpu_devices_fake_nvml.cc)
target_link_libraries(gpufrac_test_fake_nvml PRIVATE gpufrac_abi)
set_target_properties(gpufrac_test_fake_nvml PROPERTIES
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib/test)

gpufrac_test(gpu_devices_test unit SOURCES unit/gpu_devices_test.cc LIBS gpufrac_gpu)
add_dependencies(gpu_devices_test gpufrac_test_fake_nvml)
target_compile_definitions(gpu_devices_test PRIVATE
  GPUFRAC_FAKE_NVML="$<TARGET_FILE:gpufrac_test_fake_nvml>")
gpufrac_test(common_gpu_request_test unit SOURCES unit/common_gpu_request_test.cc LIBS gpufrac_common)
gpufrac_test(common_posix_test unit SOURCES unit/common_posix_test.cc LIBS gpufrac_common)
gpufrac_test(common_compute_share_test unit SOURCES unit/common_compute_share_test.cc
             LIBS gpufrac_common)
gpufrac_test(proc_process_test unit SOURCES unit/proc_process_test.cc LIBS gpufrac_proc)
# DESIGN.md's arrows between modules, as docs/architecture.md's table lists them.
gpufrac_test(design_includes_test unit SOURCES unit/design_includes_test.cc)
gpufrac_test(gpu_mode_test unit SOURCES unit/gpu_mode_test.cc LIBS gpufrac_gpu_catalogue)
