// Which device nodes a job's cgroup closes to it (launch::WorkloadCgroup enforces the list):
// - every GPU node /dev/nvidia0..253 but its own GPUs' (so a GPU the inventory does not list is
//   closed too); the control nodes (254, 255) stay open, as every CUDA process needs them;
// - where the driver has capability nodes (machine::NvidiaCaps): the MIG "config" and "monitor"
//   capabilities, and every capability of its own GPUs but those of the GPU instance it was
//   given (the instance's access node and its compute instances'). Other GPUs' capabilities need
//   those GPUs' nodes, which are closed already.
#pragma once

#include <optional>
#include <vector>

#include "launch/cgroup.h"
#include "machine/nvidia_caps.h"

namespace gpufrac::node {

struct FencedGpu {
  int minor = -1;                        // its /dev/nvidia<minor>; -1 when unknown
  std::optional<unsigned> gpu_instance;  // the MIG GPU instance (its id) it was given, if any
};

// The nodes to deny to a job given `own` (one entry per share); nullopt when an own GPU's minor
// is unknown, in which case nothing can be fenced.
std::optional<std::vector<launch::DeviceNode>> DeniedDevices(const std::vector<FencedGpu>& own,
                                                             const machine::NvidiaCaps& caps);

}  // namespace gpufrac::node
