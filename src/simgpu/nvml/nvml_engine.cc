// What NVML and the simulator's ground-truth controls report about the compute engines:
// nvmlDeviceGetUtilizationRates, and each process's engine time and each GPU's busy time
// (engine_truth.h).
#include <optional>

#include "simgpu/core/engine.h"
#include "simgpu/core/engine_truth.h"
#include "simgpu/core/memory_ledger.h"
#include "simgpu/nvml/nvml_exports.h"
#include "simgpu/nvml/nvml_state.h"

namespace {

namespace abi = gpufrac::abi;
namespace simgpu = gpufrac::simgpu;
using abi::nvmlReturn_t;

nvmlReturn_t TruthMachine(const char* caller, unsigned int index, unsigned long long* ns,
                          simgpu::SharedMachine** machine) {
  *machine = simgpu::NvmlAttachMachine(caller);
  if (*machine == nullptr) return abi::NVML_ERROR_UNKNOWN;
  if (index >= static_cast<unsigned int>((*machine)->device_count) || ns == nullptr) {
    return abi::NVML_ERROR_INVALID_ARGUMENT;
  }
  return abi::NVML_SUCCESS;
}

}  // namespace

extern "C" {

// The memory figure is 0: the simulator has no memory traffic. NVML does not support the query
// on MIG devices, nor on a GPU in MIG mode.
nvmlReturn_t nvmlDeviceGetUtilizationRates(abi::nvmlDevice_t handle,
                                           abi::nvmlUtilization_t* utilization) {
  if (nvmlReturn_t result = simgpu::NvmlCheckInit(); result != abi::NVML_SUCCESS) return result;
  simgpu::MigIds ids;
  if (simgpu::NvmlMigDeviceFromHandle(handle, &ids)) return abi::NVML_ERROR_NOT_SUPPORTED;
  const simgpu::NvmlDevice* device = simgpu::NvmlDeviceFromHandle(handle);
  if (device == nullptr || utilization == nullptr) return abi::NVML_ERROR_INVALID_ARGUMENT;
  if (nvmlReturn_t result = simgpu::NvmlCheckDevice(device->index); result != abi::NVML_SUCCESS) {
    return result;
  }
  simgpu::SharedMachine& machine = simgpu::NvmlMachine();
  const int index = static_cast<int>(device->index);
  if (machine.devices[index].mig_current == abi::NVML_DEVICE_MIG_ENABLE) {
    return abi::NVML_ERROR_NOT_SUPPORTED;
  }
  utilization->gpu = simgpu::DeviceUtilizationPercent(machine, index);
  utilization->memory = 0;
  return abi::NVML_SUCCESS;
}

nvmlReturn_t simgpuGetProcessEngineTime(unsigned int index, unsigned int pid,
                                        unsigned long long* ns) {
  simgpu::SharedMachine* machine = nullptr;
  if (nvmlReturn_t result = TruthMachine("simgpuGetProcessEngineTime", index, ns, &machine);
      result != abi::NVML_SUCCESS) {
    return result;
  }
  for (const simgpu::ProcessSlot& slot : machine->slots) {
    const std::optional<gpufrac::proc::ProcessId> owner = simgpu::SlotOwner(slot);
    if (!owner.has_value() || static_cast<unsigned int>(owner->pid) != pid) continue;
    *ns = simgpu::ProcessEngineNs(*machine, slot, static_cast<int>(index));
    return abi::NVML_SUCCESS;
  }
  return abi::NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t simgpuGetEngineBusyTime(unsigned int index, unsigned long long* ns) {
  simgpu::SharedMachine* machine = nullptr;
  if (nvmlReturn_t result = TruthMachine("simgpuGetEngineBusyTime", index, ns, &machine);
      result != abi::NVML_SUCCESS) {
    return result;
  }
  *ns = simgpu::DeviceBusyNs(*machine, static_cast<int>(index));
  return abi::NVML_SUCCESS;
}

}  // extern "C"
