// The exported NVML entry points: init/shutdown, error strings, driver versions, device handles,
// names, UUIDs and memory information shared with the simulated CUDA driver.
#include <cstring>
#include <string_view>

#include "simgpu/core/config.h"
#include "simgpu/core/memory_ledger.h"
#include "simgpu/core/mig_state.h"
#include "simgpu/nvml/nvml_exports.h"
#include "simgpu/nvml/nvml_state.h"

namespace {

namespace abi = gpufrac::abi;
namespace simgpu = gpufrac::simgpu;
using abi::nvmlReturn_t;

// For each CUDA version, a Linux driver release that ships it, newest first.
struct DriverRelease {
  int cuda_version;
  const char* driver_version;
};
constexpr DriverRelease kDriverReleases[] = {
    {13000, "580.65.06"}, {12090, "575.57.08"}, {12080, "570.124.06"}, {12060, "560.35.03"},
    {12050, "555.42.06"}, {12040, "550.54.15"}, {12030, "545.23.08"},  {12020, "535.104.05"},
    {12010, "530.30.02"}, {12000, "525.60.13"}, {11080, "520.61.05"},  {11070, "515.43.04"},
    {11060, "510.39.01"}, {11040, "470.57.02"}, {0, "460.27.04"},
};

const char* DriverVersionText(int cuda_version) {
  for (const DriverRelease& release : kDriverReleases) {
    if (cuda_version >= release.cuda_version) return release.driver_version;
  }
  return kDriverReleases[std::size(kDriverReleases) - 1].driver_version;
}

int CudaDriverVersion() {
  static const int kVersion = simgpu::DriverVersionFromEnv();
  return kVersion;
}

nvmlReturn_t CopyString(std::string_view text, char* buffer, unsigned int length) {
  if (buffer == nullptr) return abi::NVML_ERROR_INVALID_ARGUMENT;
  if (length < text.size() + 1) return abi::NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(buffer, text.data(), text.size());
  buffer[text.size()] = '\0';
  return abi::NVML_SUCCESS;
}

// The device behind a handle, after the init check; NVML_ERROR_GPU_IS_LOST for a lost GPU.
nvmlReturn_t GetDevice(abi::nvmlDevice_t handle, const simgpu::NvmlDevice** device) {
  if (nvmlReturn_t result = simgpu::NvmlCheckInit(); result != abi::NVML_SUCCESS) return result;
  *device = simgpu::NvmlDeviceFromHandle(handle);
  if (*device == nullptr) return abi::NVML_ERROR_INVALID_ARGUMENT;
  return simgpu::NvmlCheckDevice((*device)->index);
}

// NVML_ERROR_GPU_IS_LOST when the MIG device's GPU is lost.
nvmlReturn_t CheckMigDevice(const simgpu::MigIds& ids) {
  return simgpu::NvmlCheckDevice(static_cast<unsigned int>(ids.device));
}

// A live MIG device handle's ids; false for anything else.
bool GetLiveMigDevice(abi::nvmlDevice_t handle, simgpu::MigIds* ids) {
  if (!simgpu::NvmlMigDeviceFromHandle(handle, ids) ||
      ids->device >= static_cast<int>(simgpu::NvmlDeviceCount())) {
    return false;
  }
  const simgpu::SharedGpuInstance& instance =
      simgpu::NvmlMachine().devices[ids->device].gpu_instances[ids->gpu_instance];
  return instance.live != 0 && instance.compute[ids->compute_instance].live != 0;
}

// Total, free and used bytes of a MIG device: its GPU instance's memory.
void MigMemoryOf(const simgpu::MigIds& ids, unsigned long long* total, unsigned long long* free,
                 unsigned long long* used) {
  simgpu::SharedMachine& machine = simgpu::NvmlMachine();
  simgpu::ReclaimDeadProcesses(machine, /*self_is_stale=*/false);
  *total = machine.devices[ids.device].gpu_instances[ids.gpu_instance].total_bytes;
  const unsigned long long in_use = simgpu::MigUsedBytes(machine, ids.device, ids.gpu_instance);
  *used = in_use < *total ? in_use : *total;
  *free = *total - *used;
}

// Total, free and used bytes as the CUDA driver sees them. Memory of processes that died
// without freeing it is reclaimed first, as the real driver frees it when a process exits.
void MemoryOf(const simgpu::NvmlDevice& device, unsigned long long* total, unsigned long long* free,
              unsigned long long* used) {
  simgpu::SharedMachine& machine = simgpu::NvmlMachine();
  simgpu::ReclaimDeadProcesses(machine, /*self_is_stale=*/false);
  *total = machine.devices[device.index].total_bytes;
  const unsigned long long in_use = simgpu::UsedBytes(machine, static_cast<int>(device.index));
  *used = in_use < *total ? in_use : *total;
  *free = *total - *used;
}

}  // namespace

extern "C" {

nvmlReturn_t nvmlInit_v2() { return simgpu::NvmlInit(); }

// The flags (NO_GPUS, NO_ATTACH) change nothing here: devices are always present.
nvmlReturn_t nvmlInitWithFlags(unsigned int /*flags*/) { return simgpu::NvmlInit(); }

nvmlReturn_t nvmlShutdown() { return simgpu::NvmlShutdown(); }

const char* nvmlErrorString(nvmlReturn_t result) {
  switch (result) {
    case abi::NVML_SUCCESS:
      return "Success";
    case abi::NVML_ERROR_UNINITIALIZED:
      return "Uninitialized";
    case abi::NVML_ERROR_INVALID_ARGUMENT:
      return "Invalid Argument";
    case abi::NVML_ERROR_NOT_SUPPORTED:
      return "Not Supported";
    case abi::NVML_ERROR_NO_PERMISSION:
      return "Insufficient Permissions";
    case abi::NVML_ERROR_ALREADY_INITIALIZED:
      return "Already Initialized";
    case abi::NVML_ERROR_NOT_FOUND:
      return "Not Found";
    case abi::NVML_ERROR_INSUFFICIENT_SIZE:
      return "Insufficient Size";
    case abi::NVML_ERROR_DRIVER_NOT_LOADED:
      return "Driver Not Loaded";
    case abi::NVML_ERROR_TIMEOUT:
      return "Timeout";
    case abi::NVML_ERROR_FUNCTION_NOT_FOUND:
      return "Function Not Found";
    case abi::NVML_ERROR_GPU_IS_LOST:
      return "GPU is lost";
    case abi::NVML_ERROR_RESET_REQUIRED:
      return "GPU requires restart";
    case abi::NVML_ERROR_INSUFFICIENT_RESOURCES:
      return "Insufficient resources";
    case abi::NVML_ERROR_IN_USE:
      return "In use by another client";
    case abi::NVML_ERROR_MEMORY:
      return "Insufficient Memory";
    case abi::NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
      return "Argument version mismatch";
    default:
      return "Unknown Error";
  }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  if (nvmlReturn_t result = simgpu::NvmlCheckInit(); result != abi::NVML_SUCCESS) return result;
  return CopyString(DriverVersionText(CudaDriverVersion()), version, length);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int* version) {
  if (nvmlReturn_t result = simgpu::NvmlCheckInit(); result != abi::NVML_SUCCESS) return result;
  if (version == nullptr) return abi::NVML_ERROR_INVALID_ARGUMENT;
  *version = CudaDriverVersion();
  return abi::NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  if (nvmlReturn_t result = simgpu::NvmlCheckInit(); result != abi::NVML_SUCCESS) return result;
  if (count == nullptr) return abi::NVML_ERROR_INVALID_ARGUMENT;
  *count = simgpu::NvmlDeviceCount();
  return abi::NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, abi::nvmlDevice_t* device) {
  if (nvmlReturn_t result = simgpu::NvmlCheckInit(); result != abi::NVML_SUCCESS) return result;
  const simgpu::NvmlDevice* found = simgpu::NvmlDeviceAt(index);
  if (device == nullptr || found == nullptr) return abi::NVML_ERROR_INVALID_ARGUMENT;
  // A GPU that fell off the bus cannot be opened (nvidia-smi: "Unable to determine the device
  // handle for GPU ...: GPU is lost"); handles taken before stay, and their queries fail.
  if (nvmlReturn_t result = simgpu::NvmlCheckDevice(index); result != abi::NVML_SUCCESS) {
    return result;
  }
  *device = simgpu::NvmlHandle(found);
  return abi::NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, abi::nvmlDevice_t* device) {
  if (nvmlReturn_t result = simgpu::NvmlCheckInit(); result != abi::NVML_SUCCESS) return result;
  if (uuid == nullptr || device == nullptr) return abi::NVML_ERROR_INVALID_ARGUMENT;
  for (unsigned int i = 0; i < simgpu::NvmlDeviceCount(); ++i) {
    const simgpu::NvmlDevice* candidate = simgpu::NvmlDeviceAt(i);
    if (candidate->uuid == uuid) {
      if (nvmlReturn_t result = simgpu::NvmlCheckDevice(i); result != abi::NVML_SUCCESS) {
        return result;
      }
      *device = simgpu::NvmlHandle(candidate);
      return abi::NVML_SUCCESS;
    }
  }
  // MIG devices are found by their own UUIDs too.
  if (std::string_view(uuid).starts_with("MIG-")) {
    simgpu::SharedMachine& machine = simgpu::NvmlMachine();
    simgpu::MigLock lock(machine);
    for (int d = 0; d < static_cast<int>(simgpu::NvmlDeviceCount()); ++d) {
      const simgpu::SharedDevice& shared = machine.devices[d];
      for (int g = 0; g < simgpu::kMaxGpuInstances; ++g) {
        for (int c = 0; shared.gpu_instances[g].live != 0 && c < simgpu::kMaxComputeInstances;
             ++c) {
          if (shared.gpu_instances[g].compute[c].live != 0 &&
              simgpu::FormatMigUuid(simgpu::MigDeviceUuid(shared, g, c)) == uuid) {
            if (nvmlReturn_t result = simgpu::NvmlCheckDevice(static_cast<unsigned int>(d));
                result != abi::NVML_SUCCESS) {
              return result;
            }
            *device = simgpu::NvmlMigDeviceHandle(
                {.device = d, .gpu_instance = g, .compute_instance = c});
            return abi::NVML_SUCCESS;
          }
        }
      }
    }
  }
  return abi::NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetIndex(abi::nvmlDevice_t handle, unsigned int* index) {
  const simgpu::NvmlDevice* device;
  if (nvmlReturn_t result = GetDevice(handle, &device); result != abi::NVML_SUCCESS) {
    return result;
  }
  if (index == nullptr) return abi::NVML_ERROR_INVALID_ARGUMENT;
  *index = device->index;
  return abi::NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(abi::nvmlDevice_t handle, char* name, unsigned int length) {
  if (simgpu::MigIds ids;
      simgpu::NvmlCheckInit() == abi::NVML_SUCCESS && GetLiveMigDevice(handle, &ids)) {
    if (nvmlReturn_t result = CheckMigDevice(ids); result != abi::NVML_SUCCESS) return result;
    simgpu::MigLock lock(simgpu::NvmlMachine());
    return CopyString(simgpu::MigDeviceName(simgpu::NvmlMachine().devices[ids.device],
                                            ids.gpu_instance, ids.compute_instance),
                      name, length);
  }
  const simgpu::NvmlDevice* device;
  if (nvmlReturn_t result = GetDevice(handle, &device); result != abi::NVML_SUCCESS) {
    return result;
  }
  return CopyString(device->model->nvml_name, name, length);
}

// A MIG device's UUID is its own "MIG-..." one.
nvmlReturn_t nvmlDeviceGetUUID(abi::nvmlDevice_t handle, char* uuid, unsigned int length) {
  if (simgpu::MigIds ids;
      simgpu::NvmlCheckInit() == abi::NVML_SUCCESS && GetLiveMigDevice(handle, &ids)) {
    if (nvmlReturn_t result = CheckMigDevice(ids); result != abi::NVML_SUCCESS) return result;
    return CopyString(
        simgpu::FormatMigUuid(simgpu::MigDeviceUuid(simgpu::NvmlMachine().devices[ids.device],
                                                    ids.gpu_instance, ids.compute_instance)),
        uuid, length);
  }
  const simgpu::NvmlDevice* device;
  if (nvmlReturn_t result = GetDevice(handle, &device); result != abi::NVML_SUCCESS) {
    return result;
  }
  return CopyString(device->uuid, uuid, length);
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(abi::nvmlDevice_t handle, abi::nvmlMemory_t* memory) {
  if (simgpu::MigIds ids;
      simgpu::NvmlCheckInit() == abi::NVML_SUCCESS && GetLiveMigDevice(handle, &ids)) {
    if (nvmlReturn_t result = CheckMigDevice(ids); result != abi::NVML_SUCCESS) return result;
    if (memory == nullptr) return abi::NVML_ERROR_INVALID_ARGUMENT;
    MigMemoryOf(ids, &memory->total, &memory->free, &memory->used);
    return abi::NVML_SUCCESS;
  }
  const simgpu::NvmlDevice* device;
  if (nvmlReturn_t result = GetDevice(handle, &device); result != abi::NVML_SUCCESS) {
    return result;
  }
  if (memory == nullptr) return abi::NVML_ERROR_INVALID_ARGUMENT;
  MemoryOf(*device, &memory->total, &memory->free, &memory->used);
  return abi::NVML_SUCCESS;
}

// No memory is reported as reserved: the simulated driver keeps none back.
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(abi::nvmlDevice_t handle, abi::nvmlMemory_v2_t* memory) {
  if (simgpu::MigIds ids;
      simgpu::NvmlCheckInit() == abi::NVML_SUCCESS && GetLiveMigDevice(handle, &ids)) {
    if (nvmlReturn_t result = CheckMigDevice(ids); result != abi::NVML_SUCCESS) return result;
    if (memory == nullptr) return abi::NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != abi::kNvmlMemoryV2Version) {
      return abi::NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    }
    memory->reserved = 0;
    MigMemoryOf(ids, &memory->total, &memory->free, &memory->used);
    return abi::NVML_SUCCESS;
  }
  const simgpu::NvmlDevice* device;
  if (nvmlReturn_t result = GetDevice(handle, &device); result != abi::NVML_SUCCESS) {
    return result;
  }
  if (memory == nullptr) return abi::NVML_ERROR_INVALID_ARGUMENT;
  if (memory->version != abi::kNvmlMemoryV2Version) {
    return abi::NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  }
  memory->reserved = 0;
  MemoryOf(*device, &memory->total, &memory->free, &memory->used);
  return abi::NVML_SUCCESS;
}

}  // extern "C"
