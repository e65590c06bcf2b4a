# Tests of the node service's runner (see tests/unit or tests/integration).
