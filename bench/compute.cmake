# Compute-share benchmark (issue 17): gpufrac's compute arbiter against no limiter and a
# HAMi-core-like launch throttle, and against MPS, on the simulated GPU. Run
# bench/run_compute_bench.sh or bench/run_mps_bench.sh.
add_executable(compute_share_bench compute_share_bench.cc mps_daemon.cc)
target_link_libraries(compute_share_bench PRIVATE gpufrac_budget gpufrac_machine_mps simgpu_nvml)
# The busy loops of its CPU-pressure part are the timing tests'.
target_include_directories(compute_share_bench PRIVATE ${PROJECT_SOURCE_DIR}/tests)
target_compile_definitions(compute_share_bench PRIVATE
  GPUFRAC_BUILD_DIR="${CMAKE_BINARY_DIR}" GPUFRAC_SIMGPU_DIR="${GPUFRAC_SIMGPU_DIR}")
add_dependencies(compute_share_bench gpu_load cuda_probe gpufrac hami_like simgpu_cuda simgpu_nvml
  simgpu_mps_control simgpu_mps_server)

# The peer: an LD_PRELOAD launch throttle built only for this benchmark (never installed).
add_library(hami_like SHARED hami_like_limiter.cc)
target_link_libraries(hami_like PRIVATE gpufrac_abi Threads::Threads ${CMAKE_DL_LIBS})
target_compile_options(hami_like PRIVATE -fvisibility=hidden)
