// The simulator's ground truth about its compute engines (engine.h), for tests and benchmarks
// that need to know what each context, process and GPU really got. Not NVIDIA API: a real
// libcuda or libnvidia-ml has none of these.
#pragma once

#include "abi/cuda_abi.h"
#include "abi/nvml_abi.h"
#include "simgpu/core/export.h"

extern "C" {

// Exported by the simulated libcuda.so.1. Engine time (ns) context `ctx` of this process has
// received since it was created (or, for a primary context, since it was last retained after a
// reset): how long it held its GPU's (or MIG compute instance's) engine. CUDA_ERROR_INVALID_VALUE
// for a null `ns`, CUDA_ERROR_INVALID_CONTEXT for a handle that is not an active context of this
// process, CUDA_ERROR_NOT_INITIALIZED before cuInit.
SIMGPU_EXPORT gpufrac::abi::CUresult simgpuCtxGetEngineTime(gpufrac::abi::CUcontext ctx,
                                                            unsigned long long* ns);

// Exported by the simulated libnvidia-ml.so.1; like the fault-injection controls they act on the
// shared machine of SIMGPU_NAMESPACE and need no nvmlInit. NVML_ERROR_INVALID_ARGUMENT for an
// index past the last GPU or a null `ns`; NVML_ERROR_UNKNOWN when the machine cannot be joined.

// Engine time (ns) process `pid` has received on physical GPU `index` (or in its MIG devices),
// over all its contexts since it called cuInit. NVML_ERROR_NOT_FOUND when no live process with
// that pid is attached to the machine.
SIMGPU_EXPORT gpufrac::abi::nvmlReturn_t simgpuGetProcessEngineTime(unsigned int index,
                                                                    unsigned int pid,
                                                                    unsigned long long* ns);

// Time (ns) the engine of physical GPU `index` has been busy since the machine was created. In
// MIG mode each compute instance is an engine and their busy times add up.
SIMGPU_EXPORT gpufrac::abi::nvmlReturn_t simgpuGetEngineBusyTime(unsigned int index,
                                                                 unsigned long long* ns);

}  // extern "C"

namespace gpufrac::simgpu {

using simgpuCtxGetEngineTime_t = abi::CUresult (*)(abi::CUcontext ctx, unsigned long long* ns);
using simgpuGetProcessEngineTime_t = abi::nvmlReturn_t (*)(unsigned int index, unsigned int pid,
                                                           unsigned long long* ns);
using simgpuGetEngineBusyTime_t = abi::nvmlReturn_t (*)(unsigned int index, unsigned long long* ns);

inline constexpr const char kSimgpuCtxGetEngineTimeSymbol[] = "simgpuCtxGetEngineTime";
inline constexpr const char kSimgpuGetProcessEngineTimeSymbol[] = "simgpuGetProcessEngineTime";
inline constexpr const char kSimgpuGetEngineBusyTimeSymbol[] = "simgpuGetEngineBusyTime";

}  // namespace gpufrac::simgpu
