# The pod request grammar, the inventory and assignment documents, the extender's books (Ledger)
# the kube-scheduler extender protocol and the GPU reservation pods. Pure of I/O: the API server
# is behind ClusterApi.
add_library(gpufrac_k8s STATIC pod_request.cc unfit_reasons.cc inventory.cc assignment.cc object_fields.cc ledger.cc
            pending_bookings.cc agent_pods.cc extender.cc reservations.cc)
target_link_libraries(gpufrac_k8s PUBLIC gpufrac_common gpufrac_placement gpufrac_mig_planner
                      gpufrac_gpu_catalogue nlohmann_json::nlohmann_json)

# The node agent's resource managers behind the device plugins: gpufrac.io/gpu (slots, Allocate,
# the pod it is for from the kubelet's PodResources, MIG, limit files) and NVIDIA's resource names (whole GPUs, static MIG instances).
# NVIDIA's device plugin configuration file (its sharing section), parsed with yaml-cpp and
# matched to the node's GPUs; a library of its own so that its tests need no gRPC.
find_package(yaml-cpp REQUIRED)
add_library(gpufrac_k8s_nvidia_sharing STATIC nvidia_sharing_config.cc)
target_link_libraries(gpufrac_k8s_nvidia_sharing PUBLIC gpufrac_k8s PRIVATE yaml-cpp)

add_library(gpufrac_k8s_agent STATIC container_gpus.cc container_limiter.cc container_mps.cc
            gpu_provider.cc nvidia_provider.cc)
# gpufrac_machine_mps for the MPS daemons (the same as gpufracd's).
target_link_libraries(gpufrac_k8s_agent PUBLIC gpufrac_k8s gpufrac_k8s_plugin gpufrac_k8s_pod_resources
                      gpufrac_mig_control gpufrac_launch gpufrac_machine_mps
                      gpufrac_k8s_nvidia_sharing)

# The processes: ClusterApi over the API server, the extender service and the node agent.
add_library(gpufrac_k8s_services STATIC kube_cluster_api.cc extender_service.cc agent_service.cc
            health_endpoint.cc)
target_link_libraries(gpufrac_k8s_services PUBLIC gpufrac_k8s gpufrac_k8s_agent gpufrac_k8s_client
                      gpufrac_machine PRIVATE PkgConfig::HTTPLIB)

# The node's labels (GPU feature discovery's names, MIG's included), and the node's
# nvidia.com/mig.config label applied to the static MIG GPUs as NVIDIA's MIG manager does.
target_sources(gpufrac_k8s_agent PRIVATE node_labels.cc)
target_sources(gpufrac_k8s_services PRIVATE mig_config_label.cc)
