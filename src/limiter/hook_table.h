// The one table of every driver entry point the limiter interposes. The direct-link exports, the
// dlsym path, the cuGetProcAddress path and the pointers to the real functions are all generated
// from it, so they cannot drift apart. Each entry point's type and the CUDA version that
// introduced it come from the project's one table of entry points (abi/cuda_entry_points.h,
// abi/nvml_entry_points.h, as abi::entry::<symbol>), which the simulated driver exports.
//
// X(library, symbol, optional)
//   optional = 1: absent from some supported drivers (e.g. cuCtxCreate_v4 before CUDA 12.5,
//   cuGetProcAddress v1 on 13.x), or hooked only to be refused (the 32-bit forms from before
//   CUDA 3.2, hooks_legacy.cc); its absence is not worth a warning.
#pragma once

#include "abi/cuda_entry_points.h"
#include "abi/nvml_entry_points.h"

#define GPUFRAC_HOOKS(X)                       \
  X(Cuda, cuInit, 0)                           \
  X(Cuda, cuGetProcAddress, 1)                 \
  X(Cuda, cuGetProcAddress_v2, 1)              \
  X(Cuda, cuDeviceTotalMem_v2, 0)              \
  X(Cuda, cuMemGetInfo_v2, 0)                  \
  X(Cuda, cuMemAlloc_v2, 0)                    \
  X(Cuda, cuMemAllocPitch_v2, 0)               \
  X(Cuda, cuMemAllocManaged, 0)                \
  X(Cuda, cuMemFree_v2, 0)                     \
  X(Cuda, cuMemAllocAsync, 0)                  \
  X(Cuda, cuMemAllocAsync_ptsz, 0)             \
  X(Cuda, cuMemAllocFromPoolAsync, 0)          \
  X(Cuda, cuMemAllocFromPoolAsync_ptsz, 0)     \
  X(Cuda, cuMemFreeAsync, 0)                   \
  X(Cuda, cuMemFreeAsync_ptsz, 0)              \
  X(Cuda, cuMemPoolCreate, 0)                  \
  X(Cuda, cuMemPoolDestroy, 0)                 \
  X(Cuda, cuMemCreate, 0)                      \
  X(Cuda, cuMemRelease, 0)                     \
  X(Cuda, cuMemMap, 0)                         \
  X(Cuda, cuMemUnmap, 0)                       \
  X(Cuda, cuMemRetainAllocationHandle, 0)      \
  X(Cuda, cuArrayCreate_v2, 0)                 \
  X(Cuda, cuArray3DCreate_v2, 0)               \
  X(Cuda, cuArrayDestroy, 0)                   \
  X(Cuda, cuMipmappedArrayCreate, 0)           \
  X(Cuda, cuMipmappedArrayDestroy, 0)          \
  X(Cuda, cuCtxCreate_v2, 1)                   \
  X(Cuda, cuCtxCreate_v3, 1)                   \
  X(Cuda, cuCtxCreate_v4, 1)                   \
  X(Cuda, cuCtxDestroy_v2, 0)                  \
  X(Cuda, cuDevicePrimaryCtxRetain, 0)         \
  X(Cuda, cuDevicePrimaryCtxRelease_v2, 0)     \
  X(Cuda, cuDevicePrimaryCtxReset_v2, 0)       \
  X(Cuda, cuDeviceTotalMem, 1)                 \
  X(Cuda, cuCtxCreate, 1)                      \
  X(Cuda, cuMemAlloc, 1)                       \
  X(Cuda, cuMemAllocPitch, 1)                  \
  X(Cuda, cuMemFree, 1)                        \
  X(Cuda, cuMemGetInfo, 1)                     \
  X(Cuda, cuArrayCreate, 1)                    \
  X(Cuda, cuArray3DCreate, 1)                  \
  X(Cuda, cuLaunchKernel, 0)                   \
  X(Cuda, cuLaunchKernel_ptsz, 0)              \
  X(Cuda, cuLaunchKernelEx, 1)                 \
  X(Cuda, cuLaunchKernelEx_ptsz, 1)            \
  X(Cuda, cuLaunchCooperativeKernel, 1)        \
  X(Cuda, cuLaunchCooperativeKernel_ptsz, 1)   \
  X(Cuda, cuGraphLaunch, 1)                    \
  X(Cuda, cuGraphLaunch_ptsz, 1)               \
  X(Cuda, cuCtxSynchronize, 0)                 \
  X(Cuda, cuCtxSynchronize_v2, 1)              \
  X(Cuda, cuStreamSynchronize, 0)              \
  X(Cuda, cuStreamSynchronize_ptsz, 0)         \
  X(Cuda, cuEventSynchronize, 0)               \
  X(Nvml, nvmlDeviceGetMemoryInfo, 0)          \
  X(Nvml, nvmlDeviceGetMemoryInfo_v2, 1)       \
  X(Nvml, nvmlDeviceGetCount_v2, 0)            \
  X(Nvml, nvmlDeviceGetCount, 0)               \
  X(Nvml, nvmlDeviceGetHandleByIndex_v2, 0)    \
  X(Nvml, nvmlDeviceGetHandleByIndex, 0)       \
  X(Nvml, nvmlDeviceGetHandleByUUID, 0)        \
  X(Nvml, nvmlDeviceGetHandleByUUIDV, 1)       \
  X(Nvml, nvmlDeviceGetHandleByPciBusId_v2, 0) \
  X(Nvml, nvmlDeviceGetHandleByPciBusId, 0)    \
  X(Nvml, nvmlDeviceGetHandleBySerial, 0)      \
  X(Nvml, nvmlDeviceGetIndex, 0)               \
  X(Nvml, nvmlDeviceGetMigDeviceHandleByIndex, 1)

// Entry points the limiter calls but does not interpose: same columns.
#define GPUFRAC_CALLS(X)                  \
  X(Cuda, cuCtxGetCurrent, 0)             \
  X(Cuda, cuCtxGetDevice, 0)              \
  X(Cuda, cuEventCreate, 0)               \
  X(Cuda, cuEventRecord, 0)               \
  X(Cuda, cuEventRecord_ptsz, 0)          \
  X(Cuda, cuEventQuery, 0)                \
  X(Cuda, cuEventElapsedTime, 1)          \
  X(Cuda, cuStreamIsCapturing, 1)         \
  X(Cuda, cuStreamIsCapturing_ptsz, 1)    \
  X(Cuda, cuDeviceGetUuid_v2, 1)          \
  X(Cuda, cuDeviceGetUuid, 0)             \
  X(Nvml, nvmlDeviceGetUUID, 0)           \
  X(Nvml, nvmlDeviceIsMigDeviceHandle, 1) \
  X(Nvml, nvmlDeviceGetDeviceHandleFromMigDeviceHandle, 1) \
  X(Nvml, nvmlInit_v2, 0)                 \
  X(Nvml, nvmlDeviceGetProcessUtilization, 1)
