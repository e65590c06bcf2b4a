# Tests of mig_planner (being written).
