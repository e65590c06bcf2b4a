# Tests of the node service's HTTP server and metrics (see tests/unit or tests/integration).
gpufrac_test(node_metrics_test unit
  SOURCES unit/node_metrics_test.cc
  LIBS gpufrac_node_http)
gpufrac_test(node_http_test integration
  SOURCES integration/node_http_test.cc
  LIBS gpufrac_node_http PkgConfig::HTTPLIB)
