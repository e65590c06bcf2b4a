// What CUDA_VISIBLE_DEVICES entries can name on a simulated machine: every GPU's UUID and, on
// GPUs in MIG mode, every MIG device's, with where each MIG device is. The CUDA driver resolves
// a process's devices with it, and the MPS control daemon the devices its servers serve.
#pragma once

#include <string>
#include <vector>

#include "simgpu/core/mig_state.h"
#include "simgpu/core/shared_machine.h"
#include "simgpu/core/visible_devices.h"

namespace gpufrac::simgpu {

struct MachineDeviceNames {
  DeviceNames names;
  std::vector<MigBinding> migs;  // where names.migs[i] is
};

// The machine's names now. The caller holds the MigLock, so that a MIG device it then binds to
// cannot be destroyed in between.
MachineDeviceNames CollectDeviceNamesLocked(const SharedMachine& machine);

// The UUID a visible device goes by: "GPU-..." or, for a MIG device, "MIG-...".
std::string VisibleDeviceUuid(const DeviceNames& names, const VisibleDeviceRef& ref);

}  // namespace gpufrac::simgpu
