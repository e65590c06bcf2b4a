# Tests of the placement engine (cluster model, fit, policies, scheduler).
gpufrac_test(placement_scheduler_test unit SOURCES unit/placement_scheduler_test.cc
             LIBS gpufrac_placement)
gpufrac_test(placement_policies_test unit SOURCES unit/placement_policies_test.cc
             LIBS gpufrac_placement)
gpufrac_test(placement_host_gpus_test unit SOURCES unit/placement_host_gpus_test.cc
             LIBS gpufrac_placement)
