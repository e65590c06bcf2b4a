# End-to-end tests of gpufracd and the gpufrac commands that talk to it (simulated GPUs).
gpufrac_test(node_service_test integration SOURCES integration/node_service_test.cc
             LIBS gpufrac_test_harness gpufrac_node_service simgpu_core PkgConfig::HTTPLIB
                  nlohmann_json::nlohmann_json)
add_dependencies(node_service_test gpufracd gpufrac_main gpufrac_shim gpufrac cuda_probe gpu_load
                 arbiter_forger
                 mps_probe simgpu_cuda simgpu_nvml simgpu_mps_control simgpu_mps_server)

gpufrac_test(node_mig_scheduler_test unit SOURCES unit/node_mig_scheduler_test.cc
             LIBS gpufrac_node_mig)
gpufrac_test(node_api_routes_test unit SOURCES unit/node_api_routes_test.cc
             LIBS gpufrac_node_service)
