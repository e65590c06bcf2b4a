# Tests of the simulator: trace reading, and the FGD paper's protocol against the published
# results. The openb data is read where it lives (never copied into the repository).
gpufrac_test(sim_openb_trace_test unit SOURCES unit/sim_openb_trace_test.cc LIBS gpufrac_sim)

gpufrac_test(sim_openb_baselines_test slow SOURCES integration/sim_openb_baselines_test.cc
             LIBS gpufrac_sim)
target_compile_definitions(sim_openb_baselines_test PRIVATE
  GPUFRAC_OPENB_DIR="${GPUFRAC_OPENB_DIR}")

gpufrac_test(sim_cli_test integration SOURCES integration/sim_cli_test.cc
             LIBS gpufrac_test_harness nlohmann_json::nlohmann_json)
add_dependencies(sim_cli_test gpufrac_main)
