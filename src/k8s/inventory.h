// A node's GPUs as the node agent publishes them for the scheduler extender: one JSON document
// in the node annotation gpufrac.io/gpus, written by the agent and read by the extender, so the
// two agree on what exists (model, memory, mode, health, MIG instances) without sharing memory.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/compute_share.h"
#include "common/status.h"
#include "gpu/gpu_mode.h"

namespace gpufrac::k8s {

inline constexpr std::string_view kAnnotationInventory = "gpufrac.io/gpus";
// A node label the node agent sets while it serves `nvidia.com/gpu` itself (--nvidia-gpus).
// There gpufrac's shared GPUs are not `nvidia.com/gpu` devices at all, so the extender makes no
// reservation pod: one would take a GPU that the agent serves whole.
inline constexpr std::string_view kLabelServesNvidiaGpu = "gpufrac.io/nvidia-gpu-plugin";

// How a GPU is used: whole GPUs only, fractions under the limiter, or dynamic MIG.
using gpu::GpuMode;

// A MIG instance that exists on a GPU.
struct MigInstanceInfo {
  std::string profile;  // "2g.20gb"
  int start = 0;        // Placement, in memory slices.
  int size = 0;
  std::string uuid;  // "MIG-..."; "" when unknown.
  std::string pod;   // "namespace/name" of the pod it serves; "" when idle.
  friend bool operator==(const MigInstanceInfo&, const MigInstanceInfo&) = default;
};

struct GpuInfo {
  int index = 0;
  std::string uuid;           // "GPU-..."
  std::string model;          // Catalogue short name ("H100-80GB"); "" when unknown.
  uint64_t memory_bytes = 0;  // Total memory.
  GpuMode mode = GpuMode::kShared;
  bool healthy = true;
  std::vector<MigInstanceInfo> mig;  // kMig only.
  friend bool operator==(const GpuInfo&, const GpuInfo&) = default;
};

struct NodeInventory {
  std::vector<GpuInfo> gpus;  // By index.
  int slots_per_gpu = 0;      // Pods that may share one GPU (the device plugin's slots).
  // How the agent divides a shared GPU's time (--gpu-compute-policy): the extender decides each
  // share's compute pair by it where it places a pod, and carries the pair in the assignment.
  // nullopt from an agent that publishes none (one older than the field): the agent then decides
  // the pairs at Allocate.
  std::optional<ComputePolicy> compute_policy = std::nullopt;
  friend bool operator==(const NodeInventory&, const NodeInventory&) = default;
};

// The GPU with NVML index `index`, or nullptr.
const GpuInfo* FindGpu(const NodeInventory& inventory, int index);

nlohmann::json InventoryToJson(const NodeInventory& inventory);
// kInvalidArgument naming the field when the document is malformed (duplicate indexes, an
// unknown mode, a negative size, ...).
StatusOr<NodeInventory> InventoryFromJson(const nlohmann::json& document);

}  // namespace gpufrac::k8s
