# The Kubernetes API-server client: kubeconfig / in-cluster configuration, HTTPS calls and
# watches (cpp-httplib with OpenSSL), and the list-then-watch Reflector.
find_package(OpenSSL REQUIRED)
find_package(yaml-cpp REQUIRED)
add_library(gpufrac_k8s_client STATIC kube_config.cc api_client.cc reflector.cc)
target_link_libraries(gpufrac_k8s_client
                      PUBLIC gpufrac_common nlohmann_json::nlohmann_json Threads::Threads
                      PRIVATE PkgConfig::HTTPLIB OpenSSL::SSL OpenSSL::Crypto yaml-cpp)
