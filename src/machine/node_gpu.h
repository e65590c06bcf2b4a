// One GPU as the node service's scheduler and the Kubernetes agent see it.
#pragma once

#include <cstdint>
#include <string>

#include "gpu/gpu_mode.h"

namespace gpufrac::machine {

// One GPU the node service or agent schedules (not the MIG instances of a GPU in MIG mode).
struct NodeGpu {
  int index = 0;               // NVML index.
  std::string uuid;            // "GPU-...".
  std::string model;           // Catalogue short name ("H100-80GB"); "" when not in the catalogue.
  uint64_t memory_bytes = 0;   // Total memory.
  uint64_t context_bytes = 0;  // Charged per CUDA context (ContextChargeBytes); limits exceed it.
  gpu::GpuMode mode = gpu::GpuMode::kShared;  // How it is shared now.
  // Its device node is /dev/nvidia<minor> (the driver's numbering, not NVML's index); -1 when
  // unknown. Simulated GPUs take their index.
  int minor = -1;
};

}  // namespace gpufrac::machine
