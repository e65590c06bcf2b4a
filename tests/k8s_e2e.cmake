# gpufrac on Kubernetes from end to end: the agent on simulated GPUs, the extender over HTTP, a
# fake API server and a fake kubelet.
gpufrac_test(k8s_end_to_end_test integration
             SOURCES integration/k8s_end_to_end_test.cc
             LIBS gpufrac_k8s_services k8s_fake_apiserver gpufrac_fake_kubelet PkgConfig::HTTPLIB)
# The simulated MPS control daemon and server: the agent runs one per GPU in MPS mode; the
# gpufrac command: the agent as a process of its own, killed with SIGKILL.
add_dependencies(k8s_end_to_end_test gpufrac gpufrac_main simgpu_nvml simgpu_cuda simgpu_mps_control
                 simgpu_mps_server)

# The API calls behind ClusterApi, as the fake HTTPS API server receives them.
gpufrac_test(k8s_kube_cluster_api_test integration
             SOURCES integration/k8s_kube_cluster_api_test.cc
             LIBS gpufrac_k8s_services k8s_fake_apiserver)

# The agent serving NVIDIA's resource names (nvidia.com/gpu, its replicas,
# nvidia.com/mig-<profile>) on simulated GPUs, against the fake API server and kubelet.
# With NVIDIA's sharing configuration, cuda_probe runs under the limit file a replica gets.
gpufrac_test(k8s_nvidia_resources_test integration
             SOURCES integration/k8s_nvidia_resources_test.cc
             LIBS gpufrac_k8s_services k8s_fake_apiserver gpufrac_fake_kubelet
                  gpufrac_test_harness $<TARGET_NAME_IF_EXISTS:GTest::gmock>)
add_dependencies(k8s_nvidia_resources_test gpufrac simgpu_nvml simgpu_cuda cuda_probe mps_probe
                 simgpu_mps_control simgpu_mps_server)

# A burst of binds to one node through two extender replicas, against the fake API server with
# a write latency.
gpufrac_test(k8s_bind_burst_test integration
             SOURCES integration/k8s_bind_burst_test.cc
             LIBS gpufrac_k8s_services k8s_fake_apiserver)

# The node's nvidia.com/mig.config label applied to static MIG GPUs, as NVIDIA's MIG manager
# applies it: label, state, events, advertised resources and pods placed.
gpufrac_test(k8s_mig_config_label_test integration
             SOURCES integration/k8s_mig_config_label_test.cc
             LIBS gpufrac_k8s_services k8s_fake_apiserver gpufrac_fake_kubelet
                  gpufrac_test_harness $<TARGET_NAME_IF_EXISTS:GTest::gmock>)
# cuda_probe holds a context in an instance, as a workload the agent must not disturb.
add_dependencies(k8s_mig_config_label_test gpufrac simgpu_nvml simgpu_cuda cuda_probe)
