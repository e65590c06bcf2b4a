# Tests of the MIG profile catalogue (pure data, also linked into the simulated driver).
gpufrac_test(gpu_mig_catalogue_test unit SOURCES unit/gpu_mig_catalogue_test.cc
  LIBS gpufrac_gpu_catalogue)
