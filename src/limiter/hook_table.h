// The one table of every driver entry point the limiter interposes. The direct-link exports, the
// dlsym path, the cuGetProcAddress path and the pointers to the real functions are all generated
// from it, so they cannot drift apart.
//
// X(library, symbol, function type in gpufrac::abi, optional)
//   optional = 1: absent from some supported drivers (e.g. cuCtxCreate_v4 before CUDA 12.5,
//   cuGetProcAddress v1 on 13.x); its absence is not worth a warning.
#pragma once

#define GPUFRAC_HOOKS(X)                                                   \
  X(Cuda, cuInit, cuInit_t, 0)                                             \
  X(Cuda, cuGetProcAddress, cuGetProcAddress_t, 1)                         \
  X(Cuda, cuGetProcAddress_v2, cuGetProcAddress_v2_t, 1)                   \
  X(Cuda, cuDeviceTotalMem_v2, cuDeviceTotalMem_v2_t, 0)                   \
  X(Cuda, cuMemGetInfo_v2, cuMemGetInfo_v2_t, 0)                           \
  X(Cuda, cuMemAlloc_v2, cuMemAlloc_v2_t, 0)                               \
  X(Cuda, cuMemAllocPitch_v2, cuMemAllocPitch_v2_t, 0)                     \
  X(Cuda, cuMemAllocManaged, cuMemAllocManaged_t, 0)                       \
  X(Cuda, cuMemFree_v2, cuMemFree_v2_t, 0)                                 \
  X(Cuda, cuMemAllocAsync, cuMemAllocAsync_t, 0)                           \
  X(Cuda, cuMemAllocAsync_ptsz, cuMemAllocAsync_t, 0)                      \
  X(Cuda, cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync_t, 0)           \
  X(Cuda, cuMemAllocFromPoolAsync_ptsz, cuMemAllocFromPoolAsync_t, 0)      \
  X(Cuda, cuMemFreeAsync, cuMemFreeAsync_t, 0)                             \
  X(Cuda, cuMemFreeAsync_ptsz, cuMemFreeAsync_t, 0)                        \
  X(Cuda, cuMemPoolCreate, cuMemPoolCreate_t, 0)                           \
  X(Cuda, cuMemPoolDestroy, cuMemPoolDestroy_t, 0)                         \
  X(Cuda, cuMemCreate, cuMemCreate_t, 0)                                   \
  X(Cuda, cuMemRelease, cuMemRelease_t, 0)                                 \
  X(Cuda, cuMemMap, cuMemMap_t, 0)                                         \
  X(Cuda, cuMemUnmap, cuMemUnmap_t, 0)                                     \
  X(Cuda, cuMemRetainAllocationHandle, cuMemRetainAllocationHandle_t, 0)   \
  X(Cuda, cuArrayCreate_v2, cuArrayCreate_v2_t, 0)                         \
  X(Cuda, cuArray3DCreate_v2, cuArray3DCreate_v2_t, 0)                     \
  X(Cuda, cuArrayDestroy, cuArrayDestroy_t, 0)                             \
  X(Cuda, cuMipmappedArrayCreate, cuMipmappedArrayCreate_t, 0)             \
  X(Cuda, cuMipmappedArrayDestroy, cuMipmappedArrayDestroy_t, 0)           \
  X(Cuda, cuCtxCreate_v2, cuCtxCreate_v2_t, 1)                             \
  X(Cuda, cuCtxCreate_v3, cuCtxCreate_v3_t, 1)                             \
  X(Cuda, cuCtxCreate_v4, cuCtxCreate_v4_t, 1)                             \
  X(Cuda, cuCtxDestroy_v2, cuCtxDestroy_v2_t, 0)                           \
  X(Cuda, cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain_t, 0)         \
  X(Cuda, cuDevicePrimaryCtxRelease_v2, cuDevicePrimaryCtxRelease_v2_t, 0) \
  X(Cuda, cuDevicePrimaryCtxReset_v2, cuDevicePrimaryCtxReset_v2_t, 0)     \
  X(Nvml, nvmlDeviceGetMemoryInfo, nvmlDeviceGetMemoryInfo_t, 0)           \
  X(Nvml, nvmlDeviceGetMemoryInfo_v2, nvmlDeviceGetMemoryInfo_v2_t, 1)

// Entry points the limiter calls but does not interpose: X(library, symbol, type, optional).
#define GPUFRAC_CALLS(X)                               \
  X(Cuda, cuCtxGetCurrent, cuCtxGetCurrent_t, 0)       \
  X(Cuda, cuCtxGetDevice, cuCtxGetDevice_t, 0)         \
  X(Cuda, cuDeviceGetUuid_v2, cuDeviceGetUuid_v2_t, 1) \
  X(Cuda, cuDeviceGetUuid, cuDeviceGetUuid_t, 0)       \
  X(Nvml, nvmlDeviceGetUUID, nvmlDeviceGetUUID_t, 0)
