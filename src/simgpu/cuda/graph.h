// CUDA graphs of the simulated driver, kernel nodes only: a graph is a list of kernel nodes with
// their dependencies (a node can only depend on nodes added before it, so the list is in
// topological order), and an executable graph is its instantiation in one context, which runs
// as one unit of work lasting the graph's critical path (kernels without a path between them
// overlap, as kernels on different streams of a context do).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "abi/cuda_abi.h"
#include "simgpu/cuda/context.h"
#include "simgpu/cuda/kernel.h"

namespace gpufrac::simgpu {

struct Graph;

struct GraphNode {
  static constexpr std::uint32_t kMagic = 0x476e6f64;

  std::uint32_t magic = kMagic;
  Graph* graph = nullptr;
  int index = 0;  // position in the graph's node list
  KernelShape shape;
  std::vector<int> dependencies;  // indices of earlier nodes
};

struct Graph {
  static constexpr std::uint32_t kMagic = 0x47726170;

  std::uint32_t magic = kMagic;  // cleared when the graph is destroyed
  std::vector<std::unique_ptr<GraphNode>> nodes;

  // Adds a kernel node after `dependencies` (nodes of this graph).
  GraphNode* AddKernel(const KernelShape& shape, std::vector<int> dependencies);
};

struct GraphExec {
  static constexpr std::uint32_t kMagic = 0x47657865;

  std::uint32_t magic = kMagic;  // cleared when destroyed (or its context is)
  Context* context = nullptr;
  std::uint64_t duration_ns = 0;  // the critical path in `context`
  // Where its last launch completes on the context's engine clock: a launch waits for the
  // previous one, as CUDA orders launches of one executable graph.
  std::uint64_t activation = 0;
  std::uint64_t done_ns = 0;
};

// The longest path through the graph, each kernel lasting its modelled duration at
// `ns_per_thread` (sim_time.h).
std::uint64_t CriticalPathNs(const Graph& graph, double ns_per_thread);

inline abi::CUgraph ToHandle(Graph* graph) { return reinterpret_cast<abi::CUgraph>(graph); }
inline abi::CUgraphNode ToHandle(GraphNode* node) {
  return reinterpret_cast<abi::CUgraphNode>(node);
}
inline abi::CUgraphExec ToHandle(GraphExec* exec) {
  return reinterpret_cast<abi::CUgraphExec>(exec);
}

}  // namespace gpufrac::simgpu
