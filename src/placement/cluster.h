// The cluster as the placement engine sees it: nodes with host CPU and memory and GPUs of one
// model each, every GPU with a free share and free memory. Placing and releasing requests changes
// it; every change is logged so that cached scores of the changed node can be refreshed alone.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "placement/request.h"

namespace gpufrac::placement {

// GPU model names <-> small integer ids (at most kMaxModels).
class ModelNames {
 public:
  // The id of `name`, adding it if new. Fails when kMaxModels are already known.
  StatusOr<int> Intern(std::string_view name);
  std::optional<int> Find(std::string_view name) const;
  const std::string& Name(int id) const { return names_[id]; }
  int size() const { return static_cast<int>(names_.size()); }

 private:
  std::vector<std::string> names_;
};

// A node as configured.
struct NodeSpec {
  std::string name;
  uint64_t cpu_milli = 0;
  uint64_t memory_bytes = 0;
  int model = -1;                 // Id in the cluster's ModelNames; -1 when gpu_count == 0.
  int gpu_count = 0;              // 0..kMaxGpusPerNode.
  uint64_t gpu_memory_bytes = 0;  // Memory of each GPU; 0 when not tracked (then never limits).
};

// A node's current state. Invariants: free amounts never exceed capacities; a GPU is "whole
// free" when its free share is 1000 (and its memory is all free).
struct Node {
  NodeSpec spec;
  uint64_t cpu_free = 0;
  uint64_t memory_free = 0;
  std::array<uint32_t, kMaxGpusPerNode> gpu_free_milli{};
  std::array<uint64_t, kMaxGpusPerNode> gpu_free_memory{};
  // GPU workloads running here by kind (GpuWorkloadKind): some policies group alike ones.
  std::array<uint32_t, kMaxGpusPerNode + 1> gpu_workloads{};

  // GPUs with their whole share free.
  int WholeFreeGpus() const;
  // Free thousandths over all GPUs.
  uint64_t FreeGpuMilli() const;
};

// A GPU request's kind for grouping: 0 for a share of a GPU, n for n whole GPUs.
inline int GpuWorkloadKind(const Request& r) {
  return r.gpu_milli < kMilli ? 0 : static_cast<int>(r.gpu_count);
}

// Where a request went: a node and the GPUs on it (empty for CPU-only requests).
struct Placement {
  int node = -1;
  GpuSet gpus = 0;
};

class Cluster {
 public:
  // Validates the specs (GPU counts in range, models known) and builds an empty cluster.
  static StatusOr<Cluster> Create(ModelNames models, std::vector<NodeSpec> nodes);

  const ModelNames& models() const { return models_; }
  int size() const { return static_cast<int>(nodes_.size()); }
  const Node& node(int id) const { return nodes_[id]; }
  const std::vector<Node>& nodes() const { return nodes_; }

  // Total GPU thousandths / GPUs in the cluster.
  uint64_t GpuMilliCapacity() const { return gpu_milli_capacity_; }
  // GPU thousandths currently allocated.
  uint64_t GpuMilliAllocated() const { return gpu_milli_allocated_; }

  // Takes r's resources on p.node and p.gpus (placement::Take, fit.h). p must come from
  // Fits()/a policy for this r: a placement that does not fit is a programming error (abort),
  // never a silent over-commit.
  void Apply(const Placement& p, const Request& r);
  // Gives back what Apply(p, r) took.
  void Release(const Placement& p, const Request& r);

  // Every node changed by Apply/Release, in order; a consumer remembers how far it has read.
  const std::vector<int>& change_log() const { return change_log_; }

 private:
  ModelNames models_;
  std::vector<Node> nodes_;
  uint64_t gpu_milli_capacity_ = 0;
  uint64_t gpu_milli_allocated_ = 0;
  std::vector<int> change_log_;
};

}  // namespace gpufrac::placement
