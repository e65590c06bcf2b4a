// Graph structure and its critical path (see graph.h).
#include "simgpu/cuda/graph.h"

#include <algorithm>

#include "simgpu/core/sim_time.h"

namespace gpufrac::simgpu {

GraphNode* Graph::AddKernel(const KernelShape& shape, std::vector<int> dependencies) {
  auto node = std::make_unique<GraphNode>();
  node->graph = this;
  node->index = static_cast<int>(nodes.size());
  node->shape = shape;
  node->dependencies = std::move(dependencies);
  nodes.push_back(std::move(node));
  return nodes.back().get();
}

std::uint64_t CriticalPathNs(const Graph& graph, double ns_per_thread) {
  std::vector<std::uint64_t> finish(graph.nodes.size(), 0);
  std::uint64_t longest = 0;
  for (const auto& node : graph.nodes) {
    std::uint64_t start = 0;
    for (int dependency : node->dependencies) start = std::max(start, finish[dependency]);
    finish[node->index] = start + KernelDurationNs(ns_per_thread, node->shape.Threads());
    longest = std::max(longest, finish[node->index]);
  }
  return longest;
}

}  // namespace gpufrac::simgpu
