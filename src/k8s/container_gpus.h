// What every GPU a container is given needs, whichever resource it came through (gpufrac.io/gpu
// or NVIDIA's names): the visible-devices environment and the device nodes.
#pragma once

#include <string>
#include <vector>

#include "k8s/device_provider.h"

namespace gpufrac::k8s {

// The device nodes under `dev_dir` that a container using GPUs `gpus` needs and that exist:
// nvidiactl, nvidia-uvm, nvidia-uvm-tools and nvidia<index> for each GPU (once each).
std::vector<ContainerAllocation::DeviceNode> ExistingDeviceNodes(const std::string& dev_dir,
                                                                 const std::vector<int>& gpus);

// Sets CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES to `ids` (GPU or MIG UUIDs, in order,
// comma-separated) and adds the device nodes of GPUs `gpus` (NVML indexes) under `dev_dir`.
void ExposeGpus(const std::vector<std::string>& ids, const std::string& dev_dir,
                const std::vector<int>& gpus, ContainerAllocation* out);

}  // namespace gpufrac::k8s
