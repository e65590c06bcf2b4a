// Every CUDA driver entry point gpufrac knows, once: the simulated driver exports each of them
// (simgpu/cuda/cuda_exports.h) and answers cuGetProcAddress from this table, and the limiter takes
// the type and version of each entry point it hooks or calls from here (limiter/hook_table.h).
//
// X(base name as cuGetProcAddress takes it, exported symbol, CUDA version that introduced the
//   symbol, 1 if a `<symbol>_ptsz` per-thread-default-stream variant exists too)
// The symbol's function pointer type is abi::<symbol>_t (cuda_abi.h). A base name has one row per
// ABI version; cuGetProcAddress returns the newest not newer than the caller's version.
#pragma once

#include "abi/cuda_abi.h"

#define GPUFRAC_CUDA_ENTRY_POINTS(X)                                        \
  X(cuInit, cuInit, 2000, 0)                                                \
  X(cuDriverGetVersion, cuDriverGetVersion, 2020, 0)                        \
  X(cuDeviceGet, cuDeviceGet, 2000, 0)                                      \
  X(cuDeviceGetCount, cuDeviceGetCount, 2000, 0)                            \
  X(cuDeviceGetName, cuDeviceGetName, 2000, 0)                              \
  X(cuDeviceGetUuid, cuDeviceGetUuid, 9020, 0)                              \
  X(cuDeviceGetUuid, cuDeviceGetUuid_v2, 11040, 0)                          \
  X(cuDeviceTotalMem, cuDeviceTotalMem, 2000, 0)                            \
  X(cuDeviceTotalMem, cuDeviceTotalMem_v2, 3020, 0)                         \
  X(cuDeviceGetAttribute, cuDeviceGetAttribute, 2000, 0)                    \
  X(cuCtxCreate, cuCtxCreate, 2000, 0)                                      \
  X(cuCtxCreate, cuCtxCreate_v2, 3020, 0)                                   \
  X(cuCtxCreate, cuCtxCreate_v3, 11040, 0)                                  \
  X(cuCtxCreate, cuCtxCreate_v4, 12050, 0)                                  \
  X(cuCtxDestroy, cuCtxDestroy_v2, 4000, 0)                                 \
  X(cuCtxGetCurrent, cuCtxGetCurrent, 4000, 0)                              \
  X(cuCtxSetCurrent, cuCtxSetCurrent, 4000, 0)                              \
  X(cuCtxGetDevice, cuCtxGetDevice, 2000, 0)                                \
  X(cuCtxPushCurrent, cuCtxPushCurrent_v2, 4000, 0)                         \
  X(cuCtxPopCurrent, cuCtxPopCurrent_v2, 4000, 0)                           \
  X(cuCtxSynchronize, cuCtxSynchronize, 2000, 0)                            \
  X(cuCtxSynchronize, cuCtxSynchronize_v2, 13000, 0)                        \
  X(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, 7000, 0)            \
  X(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease_v2, 11000, 0)      \
  X(cuDevicePrimaryCtxReset, cuDevicePrimaryCtxReset_v2, 11000, 0)          \
  X(cuMemAlloc, cuMemAlloc, 2000, 0)                                        \
  X(cuMemAlloc, cuMemAlloc_v2, 3020, 0)                                     \
  X(cuMemFree, cuMemFree, 2000, 0)                                          \
  X(cuMemFree, cuMemFree_v2, 3020, 0)                                       \
  X(cuMemGetInfo, cuMemGetInfo, 2000, 0)                                    \
  X(cuMemGetInfo, cuMemGetInfo_v2, 3020, 0)                                 \
  X(cuMemAllocPitch, cuMemAllocPitch, 2000, 0)                              \
  X(cuMemAllocPitch, cuMemAllocPitch_v2, 3020, 0)                           \
  X(cuMemAllocManaged, cuMemAllocManaged, 6000, 0)                          \
  X(cuMemAllocAsync, cuMemAllocAsync, 11020, 1)                             \
  X(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync, 11020, 1)             \
  X(cuMemFreeAsync, cuMemFreeAsync, 11020, 1)                               \
  X(cuMemPoolCreate, cuMemPoolCreate, 11020, 0)                             \
  X(cuMemPoolDestroy, cuMemPoolDestroy, 11020, 0)                           \
  X(cuDeviceGetDefaultMemPool, cuDeviceGetDefaultMemPool, 11020, 0)         \
  X(cuDeviceGetMemPool, cuDeviceGetMemPool, 11020, 0)                       \
  X(cuMemCreate, cuMemCreate, 10020, 0)                                     \
  X(cuMemRelease, cuMemRelease, 10020, 0)                                   \
  X(cuMemAddressReserve, cuMemAddressReserve, 10020, 0)                     \
  X(cuMemAddressFree, cuMemAddressFree, 10020, 0)                           \
  X(cuMemMap, cuMemMap, 10020, 0)                                           \
  X(cuMemUnmap, cuMemUnmap, 10020, 0)                                       \
  X(cuMemSetAccess, cuMemSetAccess, 10020, 0)                               \
  X(cuMemGetAllocationGranularity, cuMemGetAllocationGranularity, 10020, 0) \
  X(cuMemRetainAllocationHandle, cuMemRetainAllocationHandle, 11000, 0)     \
  X(cuArrayCreate, cuArrayCreate, 2000, 0)                                  \
  X(cuArrayCreate, cuArrayCreate_v2, 3020, 0)                               \
  X(cuArray3DCreate, cuArray3DCreate, 2000, 0)                              \
  X(cuArray3DCreate, cuArray3DCreate_v2, 3020, 0)                           \
  X(cuArrayDestroy, cuArrayDestroy, 2000, 0)                                \
  X(cuMipmappedArrayCreate, cuMipmappedArrayCreate, 5000, 0)                \
  X(cuMipmappedArrayDestroy, cuMipmappedArrayDestroy, 5000, 0)              \
  X(cuMemGetAddressRange, cuMemGetAddressRange_v2, 3020, 0)                 \
  X(cuLaunchKernel, cuLaunchKernel, 4000, 1)                                \
  X(cuStreamCreate, cuStreamCreate, 2000, 0)                                \
  X(cuStreamDestroy, cuStreamDestroy_v2, 4000, 0)                           \
  X(cuStreamSynchronize, cuStreamSynchronize, 2000, 1)                      \
  X(cuStreamQuery, cuStreamQuery, 2000, 1)                                  \
  X(cuStreamWaitEvent, cuStreamWaitEvent, 3020, 1)                          \
  X(cuEventCreate, cuEventCreate, 2000, 0)                                  \
  X(cuEventDestroy, cuEventDestroy, 2000, 0)                                \
  X(cuEventDestroy, cuEventDestroy_v2, 4000, 0)                             \
  X(cuEventRecord, cuEventRecord, 2000, 1)                                  \
  X(cuEventRecordWithFlags, cuEventRecordWithFlags, 11010, 1)               \
  X(cuEventQuery, cuEventQuery, 2000, 0)                                    \
  X(cuEventSynchronize, cuEventSynchronize, 2000, 0)                        \
  X(cuEventElapsedTime, cuEventElapsedTime, 2000, 0)                        \
  X(cuEventElapsedTime, cuEventElapsedTime_v2, 12080, 0)                    \
  X(cuLaunchKernelEx, cuLaunchKernelEx, 11060, 1)                           \
  X(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel, 9000, 1)          \
  X(cuGraphCreate, cuGraphCreate, 10000, 0)                                 \
  X(cuGraphAddKernelNode, cuGraphAddKernelNode, 10000, 0)                   \
  X(cuGraphAddKernelNode, cuGraphAddKernelNode_v2, 12000, 0)                \
  X(cuStreamBeginCapture, cuStreamBeginCapture, 10000, 1)                   \
  X(cuStreamBeginCapture, cuStreamBeginCapture_v2, 10010, 1)                \
  X(cuStreamEndCapture, cuStreamEndCapture, 10000, 1)                       \
  X(cuStreamIsCapturing, cuStreamIsCapturing, 10000, 1)                     \
  X(cuGraphInstantiateWithFlags, cuGraphInstantiateWithFlags, 11040, 0)     \
  X(cuGraphLaunch, cuGraphLaunch, 10000, 1)                                 \
  X(cuGraphExecDestroy, cuGraphExecDestroy, 10000, 0)                       \
  X(cuGraphDestroy, cuGraphDestroy, 10000, 0)                               \
  X(cuModuleLoadData, cuModuleLoadData, 2000, 0)                            \
  X(cuModuleUnload, cuModuleUnload, 2000, 0)                                \
  X(cuModuleGetFunction, cuModuleGetFunction, 2000, 0)                      \
  X(cuGetErrorString, cuGetErrorString, 6000, 0)                            \
  X(cuGetErrorName, cuGetErrorName, 6000, 0)                                \
  X(cuGetProcAddress, cuGetProcAddress, 11030, 0)                           \
  X(cuGetProcAddress, cuGetProcAddress_v2, 12000, 0)

namespace gpufrac::abi::entry {

// entry::<symbol>: the function type (Fn) and CUDA version (kSince) of each exported symbol and
// of its _ptsz variant, for code that names entry points one by one.
#define GPUFRAC_ENTRY_FACTS_PTSZ_0(symbol, since)
#define GPUFRAC_ENTRY_FACTS_PTSZ_1(symbol, since) \
  struct symbol##_ptsz {                          \
    using Fn = symbol##_t;                        \
    static constexpr int kSince = since;          \
  };
#define GPUFRAC_ENTRY_FACTS(base, symbol, since, ptsz) \
  struct symbol {                                      \
    using Fn = symbol##_t;                             \
    static constexpr int kSince = since;               \
  };                                                   \
  GPUFRAC_ENTRY_FACTS_PTSZ_##ptsz(symbol, since)
GPUFRAC_CUDA_ENTRY_POINTS(GPUFRAC_ENTRY_FACTS)
#undef GPUFRAC_ENTRY_FACTS
#undef GPUFRAC_ENTRY_FACTS_PTSZ_1
#undef GPUFRAC_ENTRY_FACTS_PTSZ_0

}  // namespace gpufrac::abi::entry
