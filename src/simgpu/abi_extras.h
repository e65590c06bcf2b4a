// CUDA driver ABI facts the simulated driver needs that src/abi does not declare (yet): the
// legacy 32-bit entry points, a few flag values and error codes. Values are NVIDIA's.
#pragma once

#include "abi/cuda_abi.h"

namespace gpufrac::simgpu::legacy {

// Before CUDA 3.2 device pointers and sizes were 32-bit; these symbols are still exported.
using CUdeviceptr_v1 = unsigned int;
using cuMemAlloc_t = abi::CUresult (*)(CUdeviceptr_v1* dptr, unsigned int bytesize);
using cuMemFree_t = abi::CUresult (*)(CUdeviceptr_v1 dptr);
using cuMemGetInfo_t = abi::CUresult (*)(unsigned int* free, unsigned int* total);

}  // namespace gpufrac::simgpu::legacy

namespace gpufrac::simgpu {

inline constexpr abi::CUresult kCudaErrorContextIsDestroyed = static_cast<abi::CUresult>(709);

// Special stream handles (cuda.h: CU_STREAM_LEGACY, CU_STREAM_PER_THREAD).
inline const abi::CUstream kStreamLegacy = reinterpret_cast<abi::CUstream>(0x1);
inline const abi::CUstream kStreamPerThread = reinterpret_cast<abi::CUstream>(0x2);

inline constexpr unsigned int kStreamNonBlocking = 0x1;  // CU_STREAM_NON_BLOCKING
inline constexpr unsigned int kCtxFlagsMask = 0xFF;      // CU_CTX_FLAGS_MASK
inline constexpr unsigned int kMemAttachGlobal = 0x1;    // CU_MEM_ATTACH_GLOBAL
inline constexpr unsigned int kMemAttachHost = 0x2;      // CU_MEM_ATTACH_HOST
inline constexpr unsigned int kArray3DLayered = 0x1;     // CUDA_ARRAY3D_LAYERED

}  // namespace gpufrac::simgpu
