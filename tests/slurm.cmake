# Tests of gpufrac on Slurm: the plugin's decisions alone, and a real single-node Slurm
# (munged, slurmctld, slurmd from Debian's packages) running jobs through the plugin.
gpufrac_test(slurm_step_request_test unit SOURCES unit/slurm_step_request_test.cc
             LIBS gpufrac_slurm)
gpufrac_test(slurm_node_state_test unit SOURCES unit/slurm_node_state_test.cc LIBS gpufrac_slurm)
