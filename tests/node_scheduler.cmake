# Tests of the node service's scheduler (see tests/unit or tests/integration).
gpufrac_test(node_queue_scheduler_test unit SOURCES unit/node_queue_scheduler_test.cc
             LIBS gpufrac_node_scheduler)
gpufrac_test(node_request_shapes_test unit SOURCES unit/node_request_shapes_test.cc LIBS gpufrac_node_scheduler)
gpufrac_test(node_scheduler_parts_test unit SOURCES unit/node_scheduler_parts_test.cc
             LIBS gpufrac_node_scheduler)
