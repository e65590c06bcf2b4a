# Tests of the node service's http (see tests/unit or tests/integration).
