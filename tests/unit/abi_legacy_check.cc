// Our declarations of the pre-CUDA 3.2 entry points (src/abi/cuda_abi.h) against cuda.h, which
// declares them only when built as the driver (__CUDA_API_VERSION_INTERNAL). A file of its own,
// since that switch changes what cuda.h's public names mean. Compile-time checks only; part of
// abi_check_test.
#include <cstddef>

#include "abi/cuda_abi.h"

#ifdef GPUFRAC_HAVE_CUDA_H
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include "abi_signature.h"

namespace {

namespace ours = gpufrac::abi;
using gpufrac::testing::SameSignature;

#define CHECK_LEGACY(fn) \
  static_assert(SameSignature<ours::fn##_t, decltype(&::fn)>::value, #fn " differs from cuda.h");
CHECK_LEGACY(cuDeviceTotalMem)
CHECK_LEGACY(cuCtxCreate)
CHECK_LEGACY(cuMemAlloc)
CHECK_LEGACY(cuMemAllocPitch)
CHECK_LEGACY(cuMemFree)
CHECK_LEGACY(cuMemGetInfo)
CHECK_LEGACY(cuArrayCreate)
CHECK_LEGACY(cuArray3DCreate)
CHECK_LEGACY(cuEventDestroy)
CHECK_LEGACY(cuEventElapsedTime)
CHECK_LEGACY(cuStreamBeginCapture)
CHECK_LEGACY(cuGraphAddKernelNode)

#define CHECK_FIELD(type, field) \
  static_assert(offsetof(ours::type, field) == offsetof(::type, field), #type "." #field);
static_assert(sizeof(ours::CUDA_ARRAY_DESCRIPTOR_v1) == sizeof(::CUDA_ARRAY_DESCRIPTOR_v1));
CHECK_FIELD(CUDA_ARRAY_DESCRIPTOR_v1, Height)
CHECK_FIELD(CUDA_ARRAY_DESCRIPTOR_v1, Format)
CHECK_FIELD(CUDA_ARRAY_DESCRIPTOR_v1, NumChannels)
static_assert(sizeof(ours::CUDA_ARRAY3D_DESCRIPTOR_v1) == sizeof(::CUDA_ARRAY3D_DESCRIPTOR_v1));
CHECK_FIELD(CUDA_ARRAY3D_DESCRIPTOR_v1, Depth)
CHECK_FIELD(CUDA_ARRAY3D_DESCRIPTOR_v1, Format)
CHECK_FIELD(CUDA_ARRAY3D_DESCRIPTOR_v1, Flags)
static_assert(sizeof(ours::CUdeviceptr_v1) == sizeof(::CUdeviceptr_v1));

}  // namespace
#endif
