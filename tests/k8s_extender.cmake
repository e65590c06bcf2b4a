# Tests of the Kubernetes scheduler extender: the pod request grammar, the inventory and
# assignment documents and the Ledger, the extender protocol and the GPU reservation pods against an
# in-memory API server.
gpufrac_test(k8s_pod_request_test unit SOURCES unit/k8s_pod_request_test.cc
             LIBS gpufrac_k8s $<TARGET_NAME_IF_EXISTS:GTest::gmock>)
gpufrac_test(k8s_ledger_test unit SOURCES unit/k8s_ledger_test.cc
             LIBS gpufrac_k8s $<TARGET_NAME_IF_EXISTS:GTest::gmock>)
gpufrac_test(k8s_extender_test unit SOURCES unit/k8s_extender_test.cc
             LIBS gpufrac_k8s $<TARGET_NAME_IF_EXISTS:GTest::gmock>)
target_include_directories(k8s_extender_test PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
gpufrac_test(k8s_agent_pods_test unit SOURCES unit/k8s_agent_pods_test.cc LIBS gpufrac_k8s)
target_include_directories(k8s_agent_pods_test PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
gpufrac_test(k8s_reservations_test unit SOURCES unit/k8s_reservations_test.cc
             LIBS gpufrac_k8s $<TARGET_NAME_IF_EXISTS:GTest::gmock>)
target_include_directories(k8s_reservations_test PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
# NVIDIA's device plugin configuration file as the node agent reads it (its sharing section).
gpufrac_test(k8s_nvidia_sharing_config_test unit SOURCES unit/k8s_nvidia_sharing_config_test.cc
             LIBS gpufrac_k8s_nvidia_sharing $<TARGET_NAME_IF_EXISTS:GTest::gmock>)
