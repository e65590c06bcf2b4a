# The one client of nvidia-cuda-mps-control (machine/mps_control.h), against stand-in control
# programs.
gpufrac_test(machine_mps_control_test unit SOURCES unit/machine_mps_control_test.cc
             LIBS gpufrac_machine_mps)
# The MPS daemons' directories: made by the service, refused when anyone else could write them.
gpufrac_test(machine_mps_daemons_test unit SOURCES unit/machine_mps_daemons_test.cc
             LIBS gpufrac_machine_mps)
