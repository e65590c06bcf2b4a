# MIG benchmarks.
