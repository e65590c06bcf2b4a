# Tests of mig_catalogue (being written).
