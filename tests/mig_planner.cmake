# Tests of the MIG planner (smallest profile, placement, reuse, lazy destruction).
gpufrac_test(mig_planner_test unit SOURCES unit/mig_planner_test.cc LIBS gpufrac_mig_planner)
