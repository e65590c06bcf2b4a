# Tests of mig-parted configuration files: parsing, device matching, layout placement, export.
gpufrac_test(mig_parted_test unit SOURCES unit/mig_parted_test.cc LIBS gpufrac_mig_config)
gpufrac_test(mig_apply_test unit SOURCES unit/mig_apply_test.cc LIBS gpufrac_mig_control)
# The default configurations by NVIDIA's names, and an operator's file merged over them.
gpufrac_test(mig_default_configs_test unit SOURCES unit/mig_default_configs_test.cc
             LIBS gpufrac_mig_config)
# A machine's GPUs as MIG apply targets, built one way for gpufracd and the Kubernetes agent.
gpufrac_test(machine_mig_targets_test unit SOURCES unit/machine_mig_targets_test.cc
             LIBS gpufrac_machine)
