// The one table of every driver entry point the limiter interposes. The direct-link exports, the
// dlsym path, the cuGetProcAddress path and the pointers to the real functions are all generated
// from it, so they cannot drift apart.
//
// X(library, symbol, function type in gpufrac::abi, optional, since)
//   optional = 1: absent from some supported drivers (e.g. cuCtxCreate_v4 before CUDA 12.5,
//   cuGetProcAddress v1 on 13.x); its absence is not worth a warning.
//   since: the CUDA version that introduced this variant (cuGetProcAddress picks the newest
//   variant not newer than the caller's version); 0 for NVML.
#pragma once

#define GPUFRAC_HOOKS(X)                                                          \
  X(Cuda, cuInit, cuInit_t, 0, 2000)                                              \
  X(Cuda, cuGetProcAddress, cuGetProcAddress_t, 1, 11030)                         \
  X(Cuda, cuGetProcAddress_v2, cuGetProcAddress_v2_t, 1, 12000)                   \
  X(Cuda, cuDeviceTotalMem_v2, cuDeviceTotalMem_v2_t, 0, 3020)                    \
  X(Cuda, cuMemGetInfo_v2, cuMemGetInfo_v2_t, 0, 3020)                            \
  X(Cuda, cuMemAlloc_v2, cuMemAlloc_v2_t, 0, 3020)                                \
  X(Cuda, cuMemAllocPitch_v2, cuMemAllocPitch_v2_t, 0, 3020)                      \
  X(Cuda, cuMemAllocManaged, cuMemAllocManaged_t, 0, 6000)                        \
  X(Cuda, cuMemFree_v2, cuMemFree_v2_t, 0, 3020)                                  \
  X(Cuda, cuMemAllocAsync, cuMemAllocAsync_t, 0, 11020)                           \
  X(Cuda, cuMemAllocAsync_ptsz, cuMemAllocAsync_t, 0, 11020)                      \
  X(Cuda, cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync_t, 0, 11020)           \
  X(Cuda, cuMemAllocFromPoolAsync_ptsz, cuMemAllocFromPoolAsync_t, 0, 11020)      \
  X(Cuda, cuMemFreeAsync, cuMemFreeAsync_t, 0, 11020)                             \
  X(Cuda, cuMemFreeAsync_ptsz, cuMemFreeAsync_t, 0, 11020)                        \
  X(Cuda, cuMemPoolCreate, cuMemPoolCreate_t, 0, 11020)                           \
  X(Cuda, cuMemPoolDestroy, cuMemPoolDestroy_t, 0, 11020)                         \
  X(Cuda, cuMemCreate, cuMemCreate_t, 0, 10020)                                   \
  X(Cuda, cuMemRelease, cuMemRelease_t, 0, 10020)                                 \
  X(Cuda, cuMemMap, cuMemMap_t, 0, 10020)                                         \
  X(Cuda, cuMemUnmap, cuMemUnmap_t, 0, 10020)                                     \
  X(Cuda, cuMemRetainAllocationHandle, cuMemRetainAllocationHandle_t, 0, 11000)   \
  X(Cuda, cuArrayCreate_v2, cuArrayCreate_v2_t, 0, 3020)                          \
  X(Cuda, cuArray3DCreate_v2, cuArray3DCreate_v2_t, 0, 3020)                      \
  X(Cuda, cuArrayDestroy, cuArrayDestroy_t, 0, 2000)                              \
  X(Cuda, cuMipmappedArrayCreate, cuMipmappedArrayCreate_t, 0, 5000)              \
  X(Cuda, cuMipmappedArrayDestroy, cuMipmappedArrayDestroy_t, 0, 5000)            \
  X(Cuda, cuCtxCreate_v2, cuCtxCreate_v2_t, 1, 3020)                              \
  X(Cuda, cuCtxCreate_v3, cuCtxCreate_v3_t, 1, 11040)                             \
  X(Cuda, cuCtxCreate_v4, cuCtxCreate_v4_t, 1, 12050)                             \
  X(Cuda, cuCtxDestroy_v2, cuCtxDestroy_v2_t, 0, 4000)                            \
  X(Cuda, cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain_t, 0, 7000)          \
  X(Cuda, cuDevicePrimaryCtxRelease_v2, cuDevicePrimaryCtxRelease_v2_t, 0, 11000) \
  X(Cuda, cuDevicePrimaryCtxReset_v2, cuDevicePrimaryCtxReset_v2_t, 0, 11000)     \
  X(Nvml, nvmlDeviceGetMemoryInfo, nvmlDeviceGetMemoryInfo_t, 0, 0)               \
  X(Nvml, nvmlDeviceGetMemoryInfo_v2, nvmlDeviceGetMemoryInfo_v2_t, 1, 0)

// Entry points the limiter calls but does not interpose: same columns.
#define GPUFRAC_CALLS(X)                                      \
  X(Cuda, cuCtxGetCurrent, cuCtxGetCurrent_t, 0, 2000)        \
  X(Cuda, cuCtxGetDevice, cuCtxGetDevice_t, 0, 2000)          \
  X(Cuda, cuDeviceGetUuid_v2, cuDeviceGetUuid_v2_t, 1, 11040) \
  X(Cuda, cuDeviceGetUuid, cuDeviceGetUuid_t, 0, 9020)        \
  X(Nvml, nvmlDeviceGetUUID, nvmlDeviceGetUUID_t, 0, 0)
