# Tests of the node service's pieces.
gpufrac_test(node_queue_config_test unit SOURCES unit/node_queue_config_test.cc LIBS gpufrac_node)
gpufrac_test(node_job_wire_test unit SOURCES unit/node_job_wire_test.cc LIBS gpufrac_node)
gpufrac_test(node_submission_test unit SOURCES unit/node_submission_test.cc LIBS gpufrac_node)
gpufrac_test(node_device_fence_test unit SOURCES unit/node_device_fence_test.cc
             LIBS gpufrac_node_service)
gpufrac_test(node_compute_guard_test unit SOURCES unit/node_compute_guard_test.cc
             LIBS gpufrac_node_service)
