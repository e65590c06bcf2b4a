# Tests of mig_parted (being written).
