// Every NVML entry point gpufrac knows, once: the simulated NVML exports each of them
// (simgpu/nvml/nvml_exports.h), and the limiter takes the type of those it hooks or calls from
// here. X(exported symbol); its function pointer type is abi::<symbol>_t (nvml_abi.h).
#pragma once

#include "abi/nvml_abi.h"

#define GPUFRAC_NVML_ENTRY_POINTS(X)               \
  X(nvmlInit_v2)                                   \
  X(nvmlInitWithFlags)                             \
  X(nvmlShutdown)                                  \
  X(nvmlErrorString)                               \
  X(nvmlSystemGetDriverVersion)                    \
  X(nvmlSystemGetCudaDriverVersion)                \
  X(nvmlDeviceGetCount)                            \
  X(nvmlDeviceGetCount_v2)                         \
  X(nvmlDeviceGetHandleByIndex)                    \
  X(nvmlDeviceGetHandleByIndex_v2)                 \
  X(nvmlDeviceGetHandleByUUID)                     \
  X(nvmlDeviceGetHandleByUUIDV)                    \
  X(nvmlDeviceGetHandleByPciBusId)                 \
  X(nvmlDeviceGetHandleByPciBusId_v2)              \
  X(nvmlDeviceGetHandleBySerial)                   \
  X(nvmlDeviceGetSerial)                           \
  X(nvmlDeviceGetIndex)                            \
  X(nvmlDeviceGetName)                             \
  X(nvmlDeviceGetUUID)                             \
  X(nvmlDeviceGetMemoryInfo)                       \
  X(nvmlDeviceGetMemoryInfo_v2)                    \
  X(nvmlDeviceGetUtilizationRates)                 \
  X(nvmlDeviceGetProcessUtilization)               \
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

namespace gpufrac::abi::entry {

// entry::<symbol>: the function type (Fn) of each symbol; kSince is 0 (NVML has no per-symbol
// version lookup).
#define GPUFRAC_NVML_ENTRY_FACTS(symbol) \
  struct symbol {                        \
    using Fn = symbol##_t;               \
    static constexpr int kSince = 0;     \
  };
GPUFRAC_NVML_ENTRY_POINTS(GPUFRAC_NVML_ENTRY_FACTS)
#undef GPUFRAC_NVML_ENTRY_FACTS

}  // namespace gpufrac::abi::entry
