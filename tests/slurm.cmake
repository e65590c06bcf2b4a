# Tests of gpufrac on Slurm: the plugin's decisions alone, and a real single-node Slurm
# (munged, slurmctld, slurmd from Debian's packages) running jobs through the plugin.
gpufrac_test(slurm_step_request_test unit SOURCES unit/slurm_step_request_test.cc
             LIBS gpufrac_slurm)
gpufrac_test(slurm_node_state_test unit SOURCES unit/slurm_node_state_test.cc LIBS gpufrac_slurm)

# The real cluster: needs root and Debian's slurmctld, slurmd, slurm-client and munge
# (scripts/install-deps.sh installs them); its tests share one cluster and run alone.
if(TARGET gpufrac_spank)
  gpufrac_test(slurm_test integration SERIAL SOURCES integration/slurm_test.cc)
  add_dependencies(slurm_test gpufrac_spank gpufrac cuda_probe simgpu_cuda simgpu_nvml)
endif()
