# Tests of the node service's scheduler (see tests/unit or tests/integration).
