# Node service benchmarks.
add_executable(node_scheduler_bench node_scheduler_bench.cc)
target_link_libraries(node_scheduler_bench PRIVATE gpufrac_node_scheduler benchmark::benchmark)

# End to end: gpufracd on simulated GPUs, submissions through its API.
add_executable(node_api_bench node_api_bench.cc)
target_link_libraries(node_api_bench PRIVATE benchmark::benchmark PkgConfig::HTTPLIB Threads::Threads)
target_compile_definitions(node_api_bench PRIVATE GPUFRAC_BUILD_DIR="${CMAKE_BINARY_DIR}")
add_dependencies(node_api_bench gpufracd gpufrac_shim gpufrac simgpu_nvml simgpu_cuda)
