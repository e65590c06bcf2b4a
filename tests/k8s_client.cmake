# The API-server client against FakeApiServer, an in-memory HTTPS API server. k8s_fake_apiserver
# is a library of its own so that the extender's and node agent's tests can reuse it.
find_package(OpenSSL REQUIRED)
add_library(k8s_fake_apiserver STATIC k8s/fake_apiserver.cc)
target_include_directories(k8s_fake_apiserver PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(k8s_fake_apiserver
                      PUBLIC gpufrac_k8s_client gpufrac_common nlohmann_json::nlohmann_json
                             Threads::Threads
                      PRIVATE PkgConfig::HTTPLIB OpenSSL::SSL OpenSSL::Crypto)

gpufrac_test(k8s_api_client_test integration
             SOURCES integration/k8s_api_client_test.cc
             LIBS gpufrac_k8s_client k8s_fake_apiserver)
gpufrac_test(k8s_reflector_test integration
             SOURCES integration/k8s_reflector_test.cc
             LIBS gpufrac_k8s_client k8s_fake_apiserver)
