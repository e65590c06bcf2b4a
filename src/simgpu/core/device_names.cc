// The names of a simulated machine's devices (see device_names.h).
#include "simgpu/core/device_names.h"

#include <algorithm>
#include <iterator>

#include "simgpu/core/uuid.h"

namespace gpufrac::simgpu {

MachineDeviceNames CollectDeviceNamesLocked(const SharedMachine& machine) {
  MachineDeviceNames result;
  for (int i = 0; i < machine.device_count; ++i) {
    const SharedDevice& shared = machine.devices[i];
    Uuid uuid;
    std::copy(std::begin(shared.uuid), std::end(shared.uuid), uuid.begin());
    result.names.gpu_uuids.push_back(FormatGpuUuid(uuid));
    const bool mig_on = shared.mig_current == abi::NVML_DEVICE_MIG_ENABLE;
    result.names.mig_enabled.push_back(mig_on);
    for (int g = 0; mig_on && g < kMaxGpuInstances; ++g) {
      const SharedGpuInstance& instance = shared.gpu_instances[g];
      for (int c = 0; instance.live != 0 && c < kMaxComputeInstances; ++c) {
        if (instance.compute[c].live == 0) continue;
        result.names.migs.push_back(
            {.physical = i, .uuid = FormatMigUuid(MigDeviceUuid(shared, g, c))});
        result.migs.push_back({.device = i,
                               .gpu_instance = g,
                               .compute_instance = c,
                               .generation = static_cast<std::uint32_t>(instance.generation)});
      }
    }
  }
  return result;
}

std::string VisibleDeviceUuid(const DeviceNames& names, const VisibleDeviceRef& ref) {
  return ref.mig >= 0 ? names.migs[ref.mig].uuid : names.gpu_uuids[ref.physical];
}

}  // namespace gpufrac::simgpu
