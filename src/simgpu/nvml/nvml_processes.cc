// The exported NVML process listings (nvmlDeviceGetComputeRunningProcesses and its _v2 / _v3):
// which live processes have a CUDA context on a GPU or in one of its MIG devices, read from the
// shared machine's process slots.
#include <vector>

#include "simgpu/core/mig_state.h"
#include "simgpu/nvml/nvml_exports.h"
#include "simgpu/nvml/nvml_state.h"

namespace {

namespace abi = gpufrac::abi;
namespace simgpu = gpufrac::simgpu;
using abi::nvmlReturn_t;

void Fill(const simgpu::DeviceProcess& process, abi::nvmlProcessInfo_v1_t* info) {
  info->pid = static_cast<unsigned int>(process.pid);
  info->usedGpuMemory = process.used_bytes;
}

void Fill(const simgpu::DeviceProcess& process, abi::nvmlProcessInfo_v2_t* info) {
  info->pid = static_cast<unsigned int>(process.pid);
  info->usedGpuMemory = process.used_bytes;
  info->gpuInstanceId = process.gpu_instance >= 0 ? static_cast<unsigned int>(process.gpu_instance)
                                                  : abi::kNvmlProcessNoInstanceId;
  info->computeInstanceId = process.compute_instance >= 0
                                ? static_cast<unsigned int>(process.compute_instance)
                                : abi::kNvmlProcessNoInstanceId;
}

// On a GPU: every process on it, those in its MIG devices included (NVML's "aggregate
// information" for the parent handle in MIG mode; the simulator has no unprivileged callers). On
// a MIG device: the processes in it.
template <typename Info>
nvmlReturn_t ListProcesses(abi::nvmlDevice_t handle, unsigned int* count, Info* infos) {
  if (nvmlReturn_t result = simgpu::NvmlCheckInit(); result != abi::NVML_SUCCESS) return result;
  simgpu::MigIds ids;
  bool mig = false;
  if (simgpu::NvmlMigDeviceFromHandle(handle, &ids)) {
    if (ids.device >= static_cast<int>(simgpu::NvmlDeviceCount())) {
      return abi::NVML_ERROR_INVALID_ARGUMENT;
    }
    mig = true;
  } else if (const simgpu::NvmlDevice* device = simgpu::NvmlDeviceFromHandle(handle)) {
    ids.device = static_cast<int>(device->index);
  } else {
    return abi::NVML_ERROR_INVALID_ARGUMENT;
  }
  // infos may be null only to ask for the count (*count = 0).
  if (count == nullptr || (infos == nullptr && *count != 0)) {
    return abi::NVML_ERROR_INVALID_ARGUMENT;
  }
  if (nvmlReturn_t result = simgpu::NvmlCheckDevice(static_cast<unsigned int>(ids.device));
      result != abi::NVML_SUCCESS) {
    return result;
  }
  std::vector<simgpu::DeviceProcess> processes;
  {
    simgpu::SharedMachine& machine = simgpu::NvmlMachine();
    simgpu::MigLock lock(machine);
    if (mig) {
      // A MIG device handle outlives its compute instance (see nvml_state.h).
      const simgpu::SharedGpuInstance& instance =
          machine.devices[ids.device].gpu_instances[ids.gpu_instance];
      if (instance.live == 0 || instance.compute[ids.compute_instance].live == 0) {
        return abi::NVML_ERROR_INVALID_ARGUMENT;
      }
      processes = simgpu::DeviceProcessesLocked(machine, ids.device, ids.gpu_instance,
                                                ids.compute_instance);
    } else {
      processes = simgpu::DeviceProcessesLocked(machine, ids.device, -1, -1);
    }
  }
  // As documented: *count = 0 (and infos null) asks for the count, which comes back with
  // NVML_ERROR_INSUFFICIENT_SIZE, or NVML_SUCCESS when nothing runs.
  if (processes.size() > *count) {
    *count = static_cast<unsigned int>(processes.size());
    return abi::NVML_ERROR_INSUFFICIENT_SIZE;
  }
  for (std::size_t i = 0; i < processes.size(); ++i) Fill(processes[i], &infos[i]);
  *count = static_cast<unsigned int>(processes.size());
  return abi::NVML_SUCCESS;
}

}  // namespace

extern "C" {

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(abi::nvmlDevice_t device, unsigned int* count,
                                                  abi::nvmlProcessInfo_v1_t* infos) {
  return ListProcesses(device, count, infos);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(abi::nvmlDevice_t device, unsigned int* count,
                                                     abi::nvmlProcessInfo_v2_t* infos) {
  return ListProcesses(device, count, infos);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(abi::nvmlDevice_t device, unsigned int* count,
                                                     abi::nvmlProcessInfo_t* infos) {
  return ListProcesses(device, count, infos);
}

}  // extern "C"
