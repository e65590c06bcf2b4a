# Tests of the node service's HTTP server (see tests/integration).
gpufrac_test(node_http_test integration
  SOURCES integration/node_http_test.cc
  LIBS gpufrac_node_http PkgConfig::HTTPLIB)
