# (filled in by the k8s work)
