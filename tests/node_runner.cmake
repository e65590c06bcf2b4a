# Tests of the node service's job runner and gpufrac-shim: real jobs started through the
# two-phase protocol, on a simulated GPU under libgpufrac.so.
gpufrac_test(node_job_runner_test integration SOURCES integration/node_job_runner_test.cc
             LIBS gpufrac_node_runner gpufrac_test_harness)
add_dependencies(node_job_runner_test gpufrac_shim gpufrac cuda_probe simgpu_cuda simgpu_nvml)

# The node service's per-job GPU time (node/job_gpu_time.h) where it cannot measure.
gpufrac_test(node_job_gpu_time_test integration SOURCES integration/node_job_gpu_time_test.cc
             LIBS gpufrac_node_service gpufrac_test_harness)
add_dependencies(node_job_gpu_time_test simgpu_nvml)
