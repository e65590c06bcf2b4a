# The kubelet device plugin against a fake kubelet: real gRPC over unix sockets in a temporary
# directory. gpufrac_fake_kubelet (with the kubelet's PodResources API) is kept apart so that the
# node agent's tests can reuse it.
add_library(gpufrac_fake_kubelet STATIC k8s/fake_kubelet.cc k8s/fake_pod_resources.cc)
target_include_directories(gpufrac_fake_kubelet PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(gpufrac_fake_kubelet PUBLIC gpufrac_k8s_deviceplugin_api
                                                  gpufrac_k8s_podresources_api gpufrac_common
                                                  Threads::Threads)

gpufrac_test(k8s_device_plugin_test integration
             SOURCES integration/k8s_device_plugin_test.cc
             LIBS gpufrac_k8s_plugin gpufrac_fake_kubelet $<TARGET_NAME_IF_EXISTS:GTest::gmock>)
