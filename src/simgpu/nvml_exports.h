// C declarations of every symbol the simulated libnvidia-ml exports, with the types of src/abi:
// a definition whose signature drifts from the ABI fails to compile.
#pragma once

#include <type_traits>

#include "abi/nvml_abi.h"
#include "simgpu/export.h"

// SIMGPU_NVML_ENTRY_POINT(exported symbol)
#define SIMGPU_NVML_ENTRY_POINTS(X)                \
  X(nvmlInit_v2)                                   \
  X(nvmlInitWithFlags)                             \
  X(nvmlShutdown)                                  \
  X(nvmlErrorString)                               \
  X(nvmlSystemGetDriverVersion)                    \
  X(nvmlSystemGetCudaDriverVersion)                \
  X(nvmlDeviceGetCount_v2)                         \
  X(nvmlDeviceGetHandleByIndex_v2)                 \
  X(nvmlDeviceGetHandleByUUID)                     \
  X(nvmlDeviceGetIndex)                            \
  X(nvmlDeviceGetName)                             \
  X(nvmlDeviceGetUUID)                             \
  X(nvmlDeviceGetMemoryInfo)                       \
  X(nvmlDeviceGetMemoryInfo_v2)                    \
  X(nvmlDeviceGetComputeRunningProcesses)          \
  X(nvmlDeviceGetComputeRunningProcesses_v2)       \
  X(nvmlDeviceGetComputeRunningProcesses_v3)       \
  X(nvmlDeviceGetMigMode)                          \
  X(nvmlDeviceSetMigMode)                          \
  X(nvmlDeviceGetGpuInstanceProfileInfo)           \
  X(nvmlDeviceGetGpuInstanceProfileInfoV)          \
  X(nvmlDeviceGetGpuInstancePossiblePlacements_v2) \
  X(nvmlDeviceGetGpuInstanceRemainingCapacity)     \
  X(nvmlDeviceCreateGpuInstance)                   \
  X(nvmlDeviceCreateGpuInstanceWithPlacement)      \
  X(nvmlGpuInstanceDestroy)                        \
  X(nvmlDeviceGetGpuInstances)                     \
  X(nvmlDeviceGetGpuInstanceById)                  \
  X(nvmlGpuInstanceGetInfo)                        \
  X(nvmlGpuInstanceGetComputeInstanceProfileInfo)  \
  X(nvmlGpuInstanceGetComputeInstanceProfileInfoV) \
  X(nvmlGpuInstanceCreateComputeInstance)          \
  X(nvmlComputeInstanceDestroy)                    \
  X(nvmlGpuInstanceGetComputeInstances)            \
  X(nvmlGpuInstanceGetComputeInstanceById)         \
  X(nvmlComputeInstanceGetInfo)                    \
  X(nvmlComputeInstanceGetInfo_v2)                 \
  X(nvmlDeviceIsMigDeviceHandle)                   \
  X(nvmlDeviceGetGpuInstanceId)                    \
  X(nvmlDeviceGetComputeInstanceId)                \
  X(nvmlDeviceGetMaxMigDeviceCount)                \
  X(nvmlDeviceGetMigDeviceHandleByIndex)           \
  X(nvmlDeviceGetDeviceHandleFromMigDeviceHandle)  \
  X(nvmlDeviceGetSupportedEventTypes)              \
  X(nvmlDeviceRegisterEvents)                      \
  X(nvmlEventSetCreate)                            \
  X(nvmlEventSetWait_v2)                           \
  X(nvmlEventSetFree)

#define SIMGPU_DECLARE_NVML_ENTRY_POINT(symbol) \
  SIMGPU_EXPORT std::remove_pointer_t<::gpufrac::abi::symbol##_t> symbol;

extern "C" {
SIMGPU_NVML_ENTRY_POINTS(SIMGPU_DECLARE_NVML_ENTRY_POINT)
}

#undef SIMGPU_DECLARE_NVML_ENTRY_POINT
