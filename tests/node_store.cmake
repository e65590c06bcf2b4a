# Tests of the node service's store (see tests/unit or tests/integration).
