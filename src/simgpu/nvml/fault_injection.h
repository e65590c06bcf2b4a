// The simulator's fault-injection controls, exported by the simulated libnvidia-ml.so.1 next to
// NVML. They are not NVIDIA API: a real libnvidia-ml has none of them.
#pragma once

#include "abi/nvml_abi.h"
#include "simgpu/core/export.h"

// They act on the shared machine of SIMGPU_NAMESPACE, so a fault injected by one process is seen
// by every process of the namespace, and need no nvmlInit. Call them directly when linked
// against simgpu_nvml, or through dlsym(handle, kSimgpuInjectXidSymbol) and the pointer types
// below.

extern "C" {

// Raises XID `xid` on physical GPU `index`, as the driver does when it logs "NVRM: Xid ...":
// every event set registered for nvmlEventTypeXidCriticalError on that GPU receives an event
// with eventData = xid and no MIG instance ids. Whether the XID is fatal is for the caller to
// judge, as with real NVML. NVML_ERROR_INVALID_ARGUMENT for an index past the last GPU;
// NVML_ERROR_UNKNOWN when the machine cannot be joined (the reason is on stderr).
SIMGPU_EXPORT gpufrac::abi::nvmlReturn_t simgpuInjectXid(unsigned int index,
                                                         unsigned long long xid);

// Reports an ECC error on GPU `index`: an nvmlEventTypeDoubleBitEccError event when
// `double_bit` is nonzero, else nvmlEventTypeSingleBitEccError (eventData 0). A real DBE also
// comes with an XID (48, or 94/95 on Ampere and later); inject that too if the test needs it.
SIMGPU_EXPORT gpufrac::abi::nvmlReturn_t simgpuInjectEccError(unsigned int index, int double_bit);

// Makes GPU `index` fall off the bus (`lost` nonzero) or come back (zero, as after a reset).
// While lost, nvmlDeviceGetHandleByIndex_v2 / ByUUID and every query on a handle of the GPU or
// of its MIG devices answer NVML_ERROR_GPU_IS_LOST, and nvmlEventSetWait_v2 on a set with the
// GPU registered answers it once its pending events are read. nvmlDeviceGetCount_v2 still
// counts the GPU. No XID is raised (a real GPU that falls off the bus also logs XID 79).
SIMGPU_EXPORT gpufrac::abi::nvmlReturn_t simgpuSetGpuLost(unsigned int index, int lost);

// A kernel of process `pid` on physical GPU `index` hits a fatal fault, as one that accessed an
// illegal address would (src/simgpu/core/kernel_fault.h). Without MPS the process's contexts on the
// GPU fail; under MPS every client of its server on the GPUs the fault is contained in does.
// Their queued work is dropped and every later context-bound call there returns
// CUDA_ERROR_ILLEGAL_ADDRESS (sticky). No XID is raised. NVML_ERROR_NOT_FOUND when the process
// has no context on the GPU.
SIMGPU_EXPORT gpufrac::abi::nvmlReturn_t simgpuInjectKernelFault(unsigned int index,
                                                                 unsigned int pid);

}  // extern "C"

namespace gpufrac::simgpu {

using simgpuInjectXid_t = abi::nvmlReturn_t (*)(unsigned int index, unsigned long long xid);
using simgpuInjectEccError_t = abi::nvmlReturn_t (*)(unsigned int index, int double_bit);
using simgpuSetGpuLost_t = abi::nvmlReturn_t (*)(unsigned int index, int lost);
using simgpuInjectKernelFault_t = abi::nvmlReturn_t (*)(unsigned int index, unsigned int pid);

inline constexpr const char kSimgpuInjectXidSymbol[] = "simgpuInjectXid";
inline constexpr const char kSimgpuInjectEccErrorSymbol[] = "simgpuInjectEccError";
inline constexpr const char kSimgpuSetGpuLostSymbol[] = "simgpuSetGpuLost";
inline constexpr const char kSimgpuInjectKernelFaultSymbol[] = "simgpuInjectKernelFault";

}  // namespace gpufrac::simgpu
