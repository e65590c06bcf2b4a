# Tests of the limiter: unit tests of its pieces, and end-to-end runs of cuda_probe under
# libgpufrac.so on the simulated GPU.

# cuda_probe links the driver directly (the direct-link path). No RPATH: which libcuda.so.1 it
# gets is up to LD_LIBRARY_PATH, so the same binary runs on the simulator and on a real GPU.
add_executable(cuda_probe progs/cuda_probe.cc)
target_include_directories(cuda_probe PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests)
target_link_libraries(cuda_probe PRIVATE simgpu_cuda ${CMAKE_DL_LIBS} rt Threads::Threads)
set_target_properties(cuda_probe PROPERTIES SKIP_BUILD_RPATH ON)

gpufrac_test(limiter_config_test unit SOURCES unit/limiter_config_test.cc LIBS gpufrac_budget)
gpufrac_test(limiter_budget_test unit SOURCES unit/limiter_budget_test.cc LIBS gpufrac_budget)
gpufrac_test(limiter_compute_arbiter_test unit SOURCES unit/limiter_compute_arbiter_test.cc
             LIBS gpufrac_budget)
gpufrac_test(limiter_arbiter_guard_test unit SOURCES unit/limiter_arbiter_guard_test.cc
             LIBS gpufrac_budget)
gpufrac_test(limiter_alloc_table_test unit SOURCES unit/limiter_alloc_table_test.cc
             LIBS gpufrac_budget)
gpufrac_test(limiter_proc_address_test unit SOURCES unit/limiter_proc_address_test.cc
             LIBS gpufrac_budget)
gpufrac_test(limiter_visible_devices_test unit SOURCES unit/limiter_visible_devices_test.cc
             LIBS gpufrac_budget)
gpufrac_test(limiter_exports_test unit SOURCES unit/limiter_exports_test.cc LIBS gpufrac_abi
             ${CMAKE_DL_LIBS})
add_dependencies(limiter_exports_test gpufrac)
gpufrac_test(limiter_glibc_test unit SOURCES unit/limiter_glibc_test.cc)
add_dependencies(limiter_glibc_test gpufrac)

add_library(gpufrac_test_harness STATIC integration/harness.cc)
target_include_directories(gpufrac_test_harness PUBLIC ${PROJECT_SOURCE_DIR}/tests
                           ${PROJECT_SOURCE_DIR}/tests/integration)
target_link_libraries(gpufrac_test_harness PUBLIC gpufrac_budget)
target_compile_definitions(gpufrac_test_harness PRIVATE
  GPUFRAC_BUILD_DIR="${CMAKE_BINARY_DIR}" GPUFRAC_SIMGPU_DIR="${GPUFRAC_SIMGPU_DIR}")

gpufrac_test(limiter_test integration SOURCES integration/limiter_test.cc
             LIBS gpufrac_test_harness)
add_dependencies(limiter_test cuda_probe gpufrac simgpu_cuda simgpu_nvml)

gpufrac_test(exec_test integration SOURCES integration/exec_test.cc LIBS gpufrac_test_harness)
add_dependencies(exec_test cuda_probe gpufrac gpufrac_main simgpu_cuda simgpu_nvml)

# Our ABI declarations against the real cuda.h, wherever the CUDA toolkit is installed.
find_path(GPUFRAC_CUDA_INCLUDE cuda.h PATHS /usr/local/cuda/include NO_DEFAULT_PATH)
gpufrac_test(abi_check_test unit SOURCES unit/abi_check_test.cc unit/abi_legacy_check.cc
             LIBS gpufrac_abi)
if(GPUFRAC_CUDA_INCLUDE)
  target_include_directories(abi_check_test PRIVATE ${GPUFRAC_CUDA_INCLUDE})
  target_compile_definitions(abi_check_test PRIVATE GPUFRAC_HAVE_CUDA_H=1)
endif()

# The real-GPU check script, run on the simulated GPU (skipping what needs nvidia-smi or a
# framework), so that its plumbing is known to work before a GPU machine's time is spent on it.
add_test(NAME GpuChecksScript.RunsOnTheSimulatedGpu
         COMMAND bash ${PROJECT_SOURCE_DIR}/tests/gpu/run_real_gpu_checks.sh --sim)
set_tests_properties(GpuChecksScript.RunsOnTheSimulatedGpu PROPERTIES LABELS integration
  ENVIRONMENT "GPUFRAC=${CMAKE_BINARY_DIR}/bin/gpufrac;GPUFRAC_SIMGPU_DIR=${GPUFRAC_SIMGPU_DIR}")
# The physical-use check's own logic (per workload and in all), with a fake GPU, launcher and
# frameworks.
add_test(NAME GpuChecksScript.PhysicalUseChecksEachWorkload
         COMMAND bash ${PROJECT_SOURCE_DIR}/tests/gpu/physical_use_test.sh)
set_tests_properties(GpuChecksScript.PhysicalUseChecksEachWorkload PROPERTIES LABELS integration)
gpufrac_test(launch_test unit SOURCES unit/launch_test.cc LIBS gpufrac_launch)
gpufrac_test(launch_grant_limits_test unit SOURCES unit/launch_grant_limits_test.cc
             LIBS gpufrac_launch)

# Compute shares: gpu_load workloads under the limiter on one simulated GPU.
add_executable(gpu_load progs/gpu_load.cc)
target_include_directories(gpu_load PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(gpu_load PRIVATE simgpu_cuda)
set_target_properties(gpu_load PROPERTIES SKIP_BUILD_RPATH ON
                      RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
# A workload that rewrites its own weight in its GPU's compute arbiter (an attack).
add_executable(arbiter_forger progs/arbiter_forger.cc)
target_include_directories(arbiter_forger PRIVATE ${PROJECT_SOURCE_DIR}/src)
set_target_properties(arbiter_forger PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
gpufrac_test(compute_share_test integration SERIAL SOURCES integration/compute_share_test.cc
             LIBS gpufrac_test_harness simgpu_nvml)
add_dependencies(compute_share_test gpu_load gpufrac gpufrac_main simgpu_cuda simgpu_nvml)
