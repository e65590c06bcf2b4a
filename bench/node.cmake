# Node service benchmarks.
