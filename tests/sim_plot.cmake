# Tests of the sim module's PNG line charts. gpufrac_sim builds plot.cc and links cairo; this
# file only registers the test.
gpufrac_test(sim_plot_test unit SOURCES unit/sim_plot_test.cc LIBS gpufrac_sim)
