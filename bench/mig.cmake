# MIG benchmarks: the planner against the lowest-start rule and an oracle on a simulated
# 8 x H100-80GB node, and its speed. Run bench/run_mig_bench.sh.
add_executable(mig_planner_bench mig_planner_bench.cc)
target_link_libraries(mig_planner_bench PRIVATE gpufrac_mig_planner benchmark::benchmark)
