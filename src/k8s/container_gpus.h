// What every GPU a container is given needs, whichever resource it came through (gpufrac.io/gpu
// or NVIDIA's names): the visible-devices environment and the device nodes.
#pragma once

#include <string>
#include <vector>

#include "k8s/device_provider.h"

namespace gpufrac::k8s {

// Sets CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES to `ids` (GPU or MIG UUIDs, in order,
// comma-separated) and adds the device nodes of GPUs `gpus` (NVML indexes) under `dev_dir` that
// exist: nvidiactl, nvidia-uvm, nvidia-uvm-tools and nvidia<index> for each GPU (once each).
void ExposeGpus(const std::vector<std::string>& ids, const std::string& dev_dir,
                const std::vector<int>& gpus, ContainerAllocation* out);

}  // namespace gpufrac::k8s
