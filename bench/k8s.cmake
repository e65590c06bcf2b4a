# Kubernetes scheduler extender benchmark (filter + prioritize latency at 5,000 nodes).
add_executable(k8s_extender_bench k8s_extender_bench.cc)
target_link_libraries(k8s_extender_bench PRIVATE gpufrac_k8s)
