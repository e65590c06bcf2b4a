// Our ABI declarations (src/abi) against NVIDIA's cuda.h, when the CUDA toolkit is installed:
// enum values, struct layouts and function signatures must match exactly.
#include <gtest/gtest.h>

#include <cstddef>
#include <type_traits>

#include "abi/cuda_abi.h"

#ifdef GPUFRAC_HAVE_CUDA_H
// cuda.h defines these as macros, which would rewrite our names too: read ours first.
namespace before_cuda_h {
constexpr unsigned kLayered = gpufrac::abi::CUDA_ARRAY3D_LAYERED;
const gpufrac::abi::CUstream kLegacy = gpufrac::abi::CU_STREAM_LEGACY;
const gpufrac::abi::CUstream kPerThread = gpufrac::abi::CU_STREAM_PER_THREAD;
}  // namespace before_cuda_h
#include <cuda.h>

#include "abi_signature.h"

namespace {

namespace ours = gpufrac::abi;
using gpufrac::testing::SameSignature;

// Functions cuda.h declares publicly under these exact names (the _v2 names via its macros).
#define CHECKED_FUNCTIONS(X)                                                                       \
  X(cuInit)                                                                                        \
  X(cuDriverGetVersion) X(cuDeviceGet) X(cuDeviceGetCount) X(cuDeviceGetName)                      \
      X(cuDeviceGetUuid_v2) X(cuDeviceTotalMem_v2) X(cuDeviceGetAttribute) X(cuCtxCreate_v4)       \
          X(cuCtxDestroy_v2) X(cuCtxGetCurrent) X(cuCtxSetCurrent) X(cuCtxGetDevice)               \
              X(cuCtxPushCurrent_v2) X(cuCtxPopCurrent_v2) X(cuCtxSynchronize)                     \
                  X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease_v2)                      \
                      X(cuDevicePrimaryCtxReset_v2) X(cuMemAlloc_v2) X(cuMemFree_v2)               \
                          X(cuMemAllocPitch_v2) X(cuMemAllocManaged) X(cuMemAllocAsync)            \
                              X(cuMemAllocFromPoolAsync) X(cuMemFreeAsync) X(cuMemPoolCreate)      \
                                  X(cuMemPoolDestroy) X(cuDeviceGetDefaultMemPool) X(              \
                                      cuDeviceGetMemPool) X(cuMemCreate) X(cuMemRelease)           \
                                      X(cuArrayCreate_v2) X(cuArray3DCreate_v2) X(cuArrayDestroy)  \
                                          X(cuMipmappedArrayCreate) X(cuMipmappedArrayDestroy)     \
                                              X(cuMemGetInfo_v2) X(cuMemGetAddressRange_v2)        \
                                                  X(cuLaunchKernel) X(cuStreamCreate)              \
                                                      X(cuStreamDestroy_v2) X(cuStreamSynchronize) \
                                                          X(cuModuleLoadData) X(cuModuleUnload)    \
                                                              X(cuModuleGetFunction)               \
                                                                  X(cuGetErrorString)              \
                                                                      X(cuGetErrorName)            \
                                                                          X(cuGetProcAddress_v2)           \
  X(cuMemAddressReserve) X(cuMemAddressFree) X(cuMemMap) X(cuMemUnmap) X(cuMemSetAccess)          \
      X(cuMemRetainAllocationHandle) X(cuMemGetAllocationGranularity)                               \
  X(cuStreamQuery) X(cuStreamWaitEvent) X(cuEventCreate) X(cuEventDestroy_v2) X(cuEventRecord)      \
  X(cuEventRecordWithFlags) X(cuEventQuery) X(cuEventSynchronize) X(cuEventElapsedTime_v2)          \
  X(cuLaunchKernelEx) X(cuLaunchCooperativeKernel) X(cuGraphCreate) X(cuGraphAddKernelNode_v2)      \
  X(cuStreamBeginCapture_v2) X(cuStreamEndCapture) X(cuStreamIsCapturing) X(cuGraphInstantiateWithFlags) X(cuGraphLaunch) \
  X(cuGraphExecDestroy) X(cuGraphDestroy) X(cuCtxSynchronize_v2)

#define CHECK_SIGNATURE(fn) \
  static_assert(SameSignature<ours::fn##_t, decltype(&::fn)>::value, #fn " differs from cuda.h");
CHECKED_FUNCTIONS(CHECK_SIGNATURE)

#define CHECKED_ENUMERATORS(X)                                                                                  \
  X(CUDA_SUCCESS)                                                                                               \
  X(CUDA_ERROR_MPS_CONNECTION_FAILED) X(CUDA_ERROR_MPS_RPC_FAILURE) X(CUDA_ERROR_MPS_SERVER_NOT_READY)          \
  X(CUDA_ERROR_MPS_MAX_CLIENTS_REACHED) X(CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED)                               \
  X(CUDA_ERROR_MPS_CLIENT_TERMINATED)                                                                           \
  X(CUDA_ERROR_INVALID_VALUE) X(CUDA_ERROR_OUT_OF_MEMORY) X(CUDA_ERROR_NOT_INITIALIZED) X(                      \
      CUDA_ERROR_DEINITIALIZED) X(CUDA_ERROR_STUB_LIBRARY) X(CUDA_ERROR_NO_DEVICE)                              \
      X(CUDA_ERROR_INVALID_DEVICE) X(CUDA_ERROR_INVALID_IMAGE) X(CUDA_ERROR_INVALID_CONTEXT) X(                 \
          CUDA_ERROR_INVALID_PTX) X(CUDA_ERROR_FILE_NOT_FOUND) X(CUDA_ERROR_SHARED_OBJECT_INIT_FAILED)          \
          X(CUDA_ERROR_OPERATING_SYSTEM) X(CUDA_ERROR_INVALID_HANDLE) X(CUDA_ERROR_NOT_FOUND) X(                \
              CUDA_ERROR_NOT_READY) X(CUDA_ERROR_ILLEGAL_ADDRESS) X(CUDA_ERROR_LAUNCH_FAILED)                   \
              X(CUDA_ERROR_NOT_PERMITTED) X(CUDA_ERROR_NOT_SUPPORTED) X(CUDA_ERROR_UNKNOWN) X(                  \
                  CUDA_ERROR_CONTEXT_IS_DESTROYED) X(CU_STREAM_NON_BLOCKING) X(CU_CTX_FLAGS_MASK)               \
                  X(CU_MEM_ATTACH_GLOBAL) X(CU_MEM_ATTACH_HOST) X(                                              \
                      CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK) X(CU_DEVICE_ATTRIBUTE_WARP_SIZE)               \
                      X(CU_DEVICE_ATTRIBUTE_CLOCK_RATE) X(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT) X(          \
                          CU_DEVICE_ATTRIBUTE_PCI_BUS_ID) X(CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)                  \
                          X(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING) X(                                          \
                              CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT)                                      \
                              X(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) X(                                \
                                  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)                                 \
                                  X(CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY) X(                                      \
                                      CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)                  \
                                      X(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED) X(                          \
                                          CU_GET_PROC_ADDRESS_DEFAULT) X(CU_GET_PROC_ADDRESS_LEGACY_STREAM)     \
                                          X(CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) X(                   \
                                              CU_GET_PROC_ADDRESS_SUCCESS)                                      \
                                              X(CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND) X(                        \
                                                  CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT)                   \
                                                  X(CU_MEM_LOCATION_TYPE_INVALID) X(                            \
                                                      CU_MEM_LOCATION_TYPE_DEVICE) X(CU_MEM_LOCATION_TYPE_HOST) \
                                                      X(CU_MEM_LOCATION_TYPE_HOST_NUMA) X(                      \
                                                          CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT)               \
                                                          X(CU_MEM_ALLOCATION_TYPE_INVALID) X(                  \
                                                              CU_MEM_ALLOCATION_TYPE_PINNED)                    \
                                                              X(CU_MEM_HANDLE_TYPE_NONE) X(                     \
                                                                  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)     \
                                                                  X(CU_AD_FORMAT_UNSIGNED_INT8) X(              \
                                                                      CU_AD_FORMAT_UNSIGNED_INT16)              \
                                                                      X(CU_AD_FORMAT_UNSIGNED_INT32) X(         \
                                                                          CU_AD_FORMAT_SIGNED_INT8)             \
                                                                          X(CU_AD_FORMAT_SIGNED_INT16) X(       \
                                                                              CU_AD_FORMAT_SIGNED_INT32)        \
                                                                              X(CU_AD_FORMAT_HALF)              \
                                                                                  X(CU_AD_FORMAT_FLOAT)    \
  X(CU_MEM_ACCESS_FLAGS_PROT_NONE) X(CU_MEM_ACCESS_FLAGS_PROT_READ)                               \
      X(CU_MEM_ACCESS_FLAGS_PROT_READWRITE) X(CU_MEM_ALLOC_GRANULARITY_MINIMUM)                   \
          X(CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)                                             \
  X(CUDA_ERROR_ILLEGAL_STATE) X(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE)                          \
  X(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) X(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED)               \
  X(CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH) X(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR)  \
  X(CU_EVENT_DEFAULT) X(CU_EVENT_BLOCKING_SYNC) X(CU_EVENT_DISABLE_TIMING)                        \
  X(CU_EVENT_INTERPROCESS) X(CU_EVENT_RECORD_DEFAULT) X(CU_EVENT_RECORD_EXTERNAL)                 \
  X(CU_EVENT_WAIT_DEFAULT) X(CU_EVENT_WAIT_EXTERNAL) X(CU_LAUNCH_ATTRIBUTE_IGNORE)                \
  X(CU_LAUNCH_ATTRIBUTE_COOPERATIVE) X(CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT)      \
  X(CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING) X(CU_STREAM_CAPTURE_MODE_GLOBAL) X(CU_STREAM_CAPTURE_STATUS_ACTIVE) X(CU_STREAM_CAPTURE_STATUS_INVALIDATED)          \
  X(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) X(CU_STREAM_CAPTURE_MODE_RELAXED)                        \
  X(CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH) X(CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD)        \
  X(CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH) X(CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY)

#define CHECK_ENUMERATOR(name)                                                        \
  static_assert(static_cast<long long>(ours::name) == static_cast<long long>(::name), \
                #name " differs from cuda.h");
CHECKED_ENUMERATORS(CHECK_ENUMERATOR)

#define CHECK_LAYOUT(type, field) \
  static_assert(offsetof(ours::type, field) == offsetof(::type, field), #type "." #field);
#define CHECK_SIZE(type) static_assert(sizeof(ours::type) == sizeof(::type), #type " size");
CHECK_SIZE(CUmemLocation)
CHECK_LAYOUT(CUmemLocation, id) CHECK_SIZE(CUmemAllocationProp)
    CHECK_LAYOUT(CUmemAllocationProp, location) CHECK_LAYOUT(CUmemAllocationProp,
                                                             win32HandleMetaData)
        CHECK_LAYOUT(CUmemAllocationProp, allocFlags) CHECK_SIZE(CUmemPoolProps)
            CHECK_LAYOUT(CUmemPoolProps, location) CHECK_LAYOUT(CUmemPoolProps, maxSize)
                CHECK_LAYOUT(CUmemPoolProps, usage) CHECK_SIZE(CUDA_ARRAY_DESCRIPTOR)
                    CHECK_LAYOUT(CUDA_ARRAY_DESCRIPTOR, Format) CHECK_LAYOUT(CUDA_ARRAY_DESCRIPTOR,
                                                                             NumChannels)
                        CHECK_SIZE(CUDA_ARRAY3D_DESCRIPTOR)
                            CHECK_LAYOUT(CUDA_ARRAY3D_DESCRIPTOR, Depth)
                                CHECK_LAYOUT(CUDA_ARRAY3D_DESCRIPTOR, Flags)
CHECK_SIZE(CUlaunchAttributeValue) CHECK_SIZE(CUlaunchAttribute) CHECK_LAYOUT(CUlaunchAttribute, value)
CHECK_SIZE(CUlaunchConfig) CHECK_LAYOUT(CUlaunchConfig, hStream) CHECK_LAYOUT(CUlaunchConfig, attrs)
CHECK_LAYOUT(CUlaunchConfig, numAttrs) CHECK_SIZE(CUDA_KERNEL_NODE_PARAMS_v1)
CHECK_LAYOUT(CUDA_KERNEL_NODE_PARAMS_v1, kernelParams) CHECK_LAYOUT(CUDA_KERNEL_NODE_PARAMS_v1, extra)
CHECK_SIZE(CUDA_KERNEL_NODE_PARAMS_v2) CHECK_LAYOUT(CUDA_KERNEL_NODE_PARAMS_v2, kern)
CHECK_LAYOUT(CUDA_KERNEL_NODE_PARAMS_v2, ctx)
                                    CHECK_SIZE(CUuuid) static_assert(sizeof(ours::CUdeviceptr) ==
                                                                     sizeof(::CUdeviceptr));
static_assert(sizeof(ours::CUmemGenericAllocationHandle) == sizeof(::CUmemGenericAllocationHandle));
CHECK_SIZE(CUmemAccessDesc)
CHECK_LAYOUT(CUmemAccessDesc, location)
CHECK_LAYOUT(CUmemAccessDesc, flags)
static_assert(sizeof(ours::CUmemAccess_flags) == sizeof(::CUmemAccess_flags));
static_assert(sizeof(ours::CUmemAllocationGranularity_flags) ==
              sizeof(::CUmemAllocationGranularity_flags));

static_assert(before_cuda_h::kLayered == CUDA_ARRAY3D_LAYERED);

TEST(AbiCheckTest, StreamHandlesMatch) {
  EXPECT_EQ(reinterpret_cast<uintptr_t>(before_cuda_h::kLegacy),
            reinterpret_cast<uintptr_t>(CU_STREAM_LEGACY));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(before_cuda_h::kPerThread),
            reinterpret_cast<uintptr_t>(CU_STREAM_PER_THREAD));
}

TEST(AbiCheckTest, DeclarationsMatchTheInstalledCudaHeader) {
  // Everything above is checked at compile time; reaching here means it all matched.
  SUCCEED() << "checked against CUDA " << CUDA_VERSION;
}

}  // namespace
#else
TEST(AbiCheckTest, DeclarationsMatchTheInstalledCudaHeader) {
  GTEST_SKIP() << "no CUDA toolkit (cuda.h) on this machine to compare against";
}
#endif
