# Tests of simgpu_mig (being written).
