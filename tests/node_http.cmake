# Tests of the node service's HTTP server (see tests/integration).
gpufrac_test(node_http_test integration
  SOURCES integration/node_http_test.cc
  LIBS gpufrac_node_http PkgConfig::HTTPLIB)
find_package(OpenSSL REQUIRED)
gpufrac_test(node_https_test integration
  SOURCES integration/node_https_test.cc
  LIBS gpufrac_node_http PkgConfig::HTTPLIB OpenSSL::SSL OpenSSL::Crypto)
