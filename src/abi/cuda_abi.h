// Our own declarations of the CUDA driver API subset gpufrac calls or interposes: real signatures,
// real enum values, real struct layouts (64-bit Linux). The build never needs the CUDA toolkit;
// tests/unit/abi_check_test.cc compares these with a real cuda.h whenever one is installed.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gpufrac::abi {

using cuuint64_t = std::uint64_t;
using CUdeviceptr = unsigned long long;  // CUdeviceptr_v2 on 64-bit hosts
using CUdevice = int;
using CUmemGenericAllocationHandle = unsigned long long;

struct CUctx_st;
struct CUstream_st;
struct CUmod_st;
struct CUfunc_st;
struct CUmemPoolHandle_st;
struct CUarray_st;
struct CUmipmappedArray_st;
struct CUevent_st;
struct CUgraph_st;
struct CUgraphNode_st;
struct CUgraphExec_st;
struct CUkern_st;
using CUcontext = CUctx_st*;
using CUstream = CUstream_st*;
using CUmodule = CUmod_st*;
using CUfunction = CUfunc_st*;
using CUmemoryPool = CUmemPoolHandle_st*;
using CUarray = CUarray_st*;
using CUmipmappedArray = CUmipmappedArray_st*;
using CUevent = CUevent_st*;
using CUgraph = CUgraph_st*;
using CUgraphNode = CUgraphNode_st*;
using CUgraphExec = CUgraphExec_st*;
using CUkernel = CUkern_st*;

enum CUresult : int {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_DEINITIALIZED = 4,
  CUDA_ERROR_STUB_LIBRARY = 34,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_INVALID_IMAGE = 200,
  CUDA_ERROR_INVALID_CONTEXT = 201,
  CUDA_ERROR_INVALID_PTX = 218,
  CUDA_ERROR_FILE_NOT_FOUND = 301,
  CUDA_ERROR_SHARED_OBJECT_INIT_FAILED = 303,
  CUDA_ERROR_OPERATING_SYSTEM = 304,
  CUDA_ERROR_INVALID_HANDLE = 400,
  CUDA_ERROR_ILLEGAL_STATE = 401,
  CUDA_ERROR_NOT_FOUND = 500,
  CUDA_ERROR_NOT_READY = 600,
  CUDA_ERROR_ILLEGAL_ADDRESS = 700,
  CUDA_ERROR_CONTEXT_IS_DESTROYED = 709,
  CUDA_ERROR_LAUNCH_FAILED = 719,
  CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE = 720,
  CUDA_ERROR_NOT_PERMITTED = 800,
  CUDA_ERROR_NOT_SUPPORTED = 801,
  CUDA_ERROR_MPS_CONNECTION_FAILED = 805,
  CUDA_ERROR_MPS_RPC_FAILURE = 806,
  CUDA_ERROR_MPS_SERVER_NOT_READY = 807,
  CUDA_ERROR_MPS_MAX_CLIENTS_REACHED = 808,
  CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED = 809,
  CUDA_ERROR_MPS_CLIENT_TERMINATED = 810,
  CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900,
  CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 901,
  CUDA_ERROR_UNKNOWN = 999,
};

enum CUdevice_attribute : int {
  CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1,
  CU_DEVICE_ATTRIBUTE_WARP_SIZE = 10,
  CU_DEVICE_ATTRIBUTE_CLOCK_RATE = 13,
  CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
  CU_DEVICE_ATTRIBUTE_PCI_BUS_ID = 33,
  CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID = 34,
  CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING = 41,
  CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT = 51,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
  CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY = 83,
  CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH = 95,
  CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 102,
  CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR = 106,
  CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED = 115,
};

// cuGetProcAddress flags and query results (CUDA 11.3+ / 12.0+).
enum CUdriverProcAddress_flags : int {
  CU_GET_PROC_ADDRESS_DEFAULT = 0,
  CU_GET_PROC_ADDRESS_LEGACY_STREAM = 1 << 0,
  CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM = 1 << 1,
};
enum CUdriverProcAddressQueryResult : int {
  CU_GET_PROC_ADDRESS_SUCCESS = 0,
  CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1,
  CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2,
};

enum CUmemLocationType : int {
  CU_MEM_LOCATION_TYPE_INVALID = 0x0,
  CU_MEM_LOCATION_TYPE_DEVICE = 0x1,
  CU_MEM_LOCATION_TYPE_HOST = 0x2,
  CU_MEM_LOCATION_TYPE_HOST_NUMA = 0x3,
  CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT = 0x4,
};
enum CUmemAllocationType : int {
  CU_MEM_ALLOCATION_TYPE_INVALID = 0x0,
  CU_MEM_ALLOCATION_TYPE_PINNED = 0x1,
};
enum CUmemAllocationHandleType : int {
  CU_MEM_HANDLE_TYPE_NONE = 0x0,
  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 0x1,
};

struct CUmemLocation {
  CUmemLocationType type;
  int id;
};

// Virtual memory management (CUDA 10.2+): access rights of a mapping and granularity queries.
enum CUmemAccess_flags : int {
  CU_MEM_ACCESS_FLAGS_PROT_NONE = 0x0,
  CU_MEM_ACCESS_FLAGS_PROT_READ = 0x1,
  CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 0x3,
};
enum CUmemAllocationGranularity_flags : int {
  CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0x0,
  CU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 0x1,
};

struct CUmemAccessDesc {
  CUmemLocation location;
  CUmemAccess_flags flags;
};

struct CUmemAllocationProp {
  CUmemAllocationType type;
  CUmemAllocationHandleType requestedHandleTypes;
  CUmemLocation location;
  void* win32HandleMetaData;
  struct {
    unsigned char compressionType;
    unsigned char gpuDirectRDMACapable;
    unsigned short usage;
    unsigned char reserved[4];
  } allocFlags;
};

struct CUmemPoolProps {
  CUmemAllocationType allocType;
  CUmemAllocationHandleType handleTypes;
  CUmemLocation location;
  void* win32SecurityAttributes;
  size_t maxSize;
  unsigned short usage;
  unsigned char reserved[54];
};

enum CUarray_format : int {
  CU_AD_FORMAT_UNSIGNED_INT8 = 0x01,
  CU_AD_FORMAT_UNSIGNED_INT16 = 0x02,
  CU_AD_FORMAT_UNSIGNED_INT32 = 0x03,
  CU_AD_FORMAT_SIGNED_INT8 = 0x08,
  CU_AD_FORMAT_SIGNED_INT16 = 0x09,
  CU_AD_FORMAT_SIGNED_INT32 = 0x0a,
  CU_AD_FORMAT_HALF = 0x10,
  CU_AD_FORMAT_FLOAT = 0x20,
};

struct CUDA_ARRAY_DESCRIPTOR {
  size_t Width;
  size_t Height;
  CUarray_format Format;
  unsigned int NumChannels;
};

struct CUDA_ARRAY3D_DESCRIPTOR {
  size_t Width;
  size_t Height;
  size_t Depth;
  CUarray_format Format;
  unsigned int NumChannels;
  unsigned int Flags;
};

struct CUuuid {
  char bytes[16];
};

// Flag and handle values.
inline const CUstream CU_STREAM_LEGACY = reinterpret_cast<CUstream>(0x1);
inline const CUstream CU_STREAM_PER_THREAD = reinterpret_cast<CUstream>(0x2);
constexpr unsigned int CU_STREAM_NON_BLOCKING = 0x1;
constexpr unsigned int CU_CTX_FLAGS_MASK = 0xFF;
constexpr unsigned int CU_MEM_ATTACH_GLOBAL = 0x1;
constexpr unsigned int CU_MEM_ATTACH_HOST = 0x2;
constexpr unsigned int CUDA_ARRAY3D_LAYERED = 0x01;

// Events (cuEventCreate, cuEventRecordWithFlags, cuStreamWaitEvent).
enum CUevent_flags : int {
  CU_EVENT_DEFAULT = 0x0,
  CU_EVENT_BLOCKING_SYNC = 0x1,
  CU_EVENT_DISABLE_TIMING = 0x2,
  CU_EVENT_INTERPROCESS = 0x4,
};
enum CUevent_record_flags : int {
  CU_EVENT_RECORD_DEFAULT = 0x0,
  CU_EVENT_RECORD_EXTERNAL = 0x1,
};
enum CUevent_wait_flags : int {
  CU_EVENT_WAIT_DEFAULT = 0x0,
  CU_EVENT_WAIT_EXTERNAL = 0x1,
};

// cuLaunchKernelEx (CUDA 11.6+). Attribute values are a 64-byte union; only `cooperative` is
// read here.
enum CUlaunchAttributeID : int {
  CU_LAUNCH_ATTRIBUTE_IGNORE = 0,
  CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW = 1,
  CU_LAUNCH_ATTRIBUTE_COOPERATIVE = 2,
  CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY = 3,
  CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4,
  CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE = 5,
  CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6,
  CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT = 7,
  CU_LAUNCH_ATTRIBUTE_PRIORITY = 8,
  CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP = 9,
  CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN = 10,
  CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION = 11,
  CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT = 12,
  CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE = 13,
  CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT = 14,
  CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING = 16,
};
union CUlaunchAttributeValue {
  char pad[64];
  int cooperative;
};
struct CUlaunchAttribute {
  CUlaunchAttributeID id;
  char pad[8 - sizeof(CUlaunchAttributeID)];
  CUlaunchAttributeValue value;
};
struct CUlaunchConfig {
  unsigned int gridDimX;
  unsigned int gridDimY;
  unsigned int gridDimZ;
  unsigned int blockDimX;
  unsigned int blockDimY;
  unsigned int blockDimZ;
  unsigned int sharedMemBytes;
  CUstream hStream;
  CUlaunchAttribute* attrs;
  unsigned int numAttrs;
};

// Graphs (CUDA 10.0+): kernel nodes, stream capture and instantiation flags.
struct CUDA_KERNEL_NODE_PARAMS_v1 {
  CUfunction func;
  unsigned int gridDimX;
  unsigned int gridDimY;
  unsigned int gridDimZ;
  unsigned int blockDimX;
  unsigned int blockDimY;
  unsigned int blockDimZ;
  unsigned int sharedMemBytes;
  void** kernelParams;
  void** extra;
};
struct CUDA_KERNEL_NODE_PARAMS_v2 {
  CUfunction func;
  unsigned int gridDimX;
  unsigned int gridDimY;
  unsigned int gridDimZ;
  unsigned int blockDimX;
  unsigned int blockDimY;
  unsigned int blockDimZ;
  unsigned int sharedMemBytes;
  void** kernelParams;
  void** extra;
  CUkernel kern;
  CUcontext ctx;
};
enum CUstreamCaptureStatus : int {
  CU_STREAM_CAPTURE_STATUS_NONE = 0,
  CU_STREAM_CAPTURE_STATUS_ACTIVE = 1,
  CU_STREAM_CAPTURE_STATUS_INVALIDATED = 2,
};
enum CUstreamCaptureMode : int {
  CU_STREAM_CAPTURE_MODE_GLOBAL = 0,
  CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1,
  CU_STREAM_CAPTURE_MODE_RELAXED = 2,
};
enum CUgraphInstantiate_flags : int {
  CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH = 1,
  CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD = 2,
  CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH = 4,
  CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY = 8,
};

struct CUexecAffinityParam;  // only passed through, never inspected
struct CUctxCreateParams;    // only passed through, never inspected

// Function types, named after the exported symbol (the versioned name the driver exports).
using cuInit_t = CUresult (*)(unsigned int flags);
using cuDriverGetVersion_t = CUresult (*)(int* version);
using cuDeviceGet_t = CUresult (*)(CUdevice* device, int ordinal);
using cuDeviceGetCount_t = CUresult (*)(int* count);
using cuDeviceGetName_t = CUresult (*)(char* name, int len, CUdevice dev);
using cuDeviceGetUuid_t = CUresult (*)(CUuuid* uuid, CUdevice dev);
using cuDeviceGetUuid_v2_t = CUresult (*)(CUuuid* uuid, CUdevice dev);
using cuDeviceTotalMem_v2_t = CUresult (*)(size_t* bytes, CUdevice dev);
using cuDeviceGetAttribute_t = CUresult (*)(int* pi, CUdevice_attribute attrib, CUdevice dev);
using cuCtxCreate_v2_t = CUresult (*)(CUcontext* pctx, unsigned int flags, CUdevice dev);
using cuCtxCreate_v3_t = CUresult (*)(CUcontext* pctx, CUexecAffinityParam* params, int numParams,
                                      unsigned int flags, CUdevice dev);
using cuCtxCreate_v4_t = CUresult (*)(CUcontext* pctx, CUctxCreateParams* params,
                                      unsigned int flags, CUdevice dev);
using cuCtxDestroy_v2_t = CUresult (*)(CUcontext ctx);
using cuCtxGetCurrent_t = CUresult (*)(CUcontext* pctx);
using cuCtxSetCurrent_t = CUresult (*)(CUcontext ctx);
using cuCtxGetDevice_t = CUresult (*)(CUdevice* device);
using cuCtxPushCurrent_v2_t = CUresult (*)(CUcontext ctx);
using cuCtxPopCurrent_v2_t = CUresult (*)(CUcontext* pctx);
using cuCtxSynchronize_t = CUresult (*)();
using cuCtxSynchronize_v2_t = CUresult (*)(CUcontext);
using cuDevicePrimaryCtxRetain_t = CUresult (*)(CUcontext* pctx, CUdevice dev);
using cuDevicePrimaryCtxRelease_v2_t = CUresult (*)(CUdevice dev);
using cuDevicePrimaryCtxReset_v2_t = CUresult (*)(CUdevice dev);
using cuMemAlloc_v2_t = CUresult (*)(CUdeviceptr* dptr, size_t bytesize);
using cuMemFree_v2_t = CUresult (*)(CUdeviceptr dptr);
using cuMemAllocPitch_v2_t = CUresult (*)(CUdeviceptr* dptr, size_t* pitch, size_t widthInBytes,
                                          size_t height, unsigned int elementSizeBytes);
using cuMemAllocManaged_t = CUresult (*)(CUdeviceptr* dptr, size_t bytesize, unsigned int flags);
using cuMemAllocAsync_t = CUresult (*)(CUdeviceptr* dptr, size_t bytesize, CUstream stream);
using cuMemAllocFromPoolAsync_t = CUresult (*)(CUdeviceptr* dptr, size_t bytesize,
                                               CUmemoryPool pool, CUstream stream);
using cuMemFreeAsync_t = CUresult (*)(CUdeviceptr dptr, CUstream stream);
using cuMemPoolCreate_t = CUresult (*)(CUmemoryPool* pool, const CUmemPoolProps* props);
using cuMemPoolDestroy_t = CUresult (*)(CUmemoryPool pool);
using cuDeviceGetDefaultMemPool_t = CUresult (*)(CUmemoryPool* pool, CUdevice dev);
using cuDeviceGetMemPool_t = CUresult (*)(CUmemoryPool* pool, CUdevice dev);
using cuMemCreate_t = CUresult (*)(CUmemGenericAllocationHandle* handle, size_t size,
                                   const CUmemAllocationProp* prop, unsigned long long flags);
using cuMemRelease_t = CUresult (*)(CUmemGenericAllocationHandle handle);
using cuMemAddressReserve_t = CUresult (*)(CUdeviceptr* ptr, size_t size, size_t alignment,
                                           CUdeviceptr addr, unsigned long long flags);
using cuMemAddressFree_t = CUresult (*)(CUdeviceptr ptr, size_t size);
using cuMemMap_t = CUresult (*)(CUdeviceptr ptr, size_t size, size_t offset,
                                CUmemGenericAllocationHandle handle, unsigned long long flags);
using cuMemUnmap_t = CUresult (*)(CUdeviceptr ptr, size_t size);
using cuMemSetAccess_t = CUresult (*)(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc,
                                      size_t count);
using cuMemRetainAllocationHandle_t = CUresult (*)(CUmemGenericAllocationHandle* handle,
                                                   void* addr);
using cuMemGetAllocationGranularity_t = CUresult (*)(size_t* granularity,
                                                     const CUmemAllocationProp* prop,
                                                     CUmemAllocationGranularity_flags option);
using cuArrayCreate_v2_t = CUresult (*)(CUarray* handle, const CUDA_ARRAY_DESCRIPTOR* desc);
using cuArray3DCreate_v2_t = CUresult (*)(CUarray* handle, const CUDA_ARRAY3D_DESCRIPTOR* desc);
using cuArrayDestroy_t = CUresult (*)(CUarray handle);
using cuMipmappedArrayCreate_t = CUresult (*)(CUmipmappedArray* handle,
                                              const CUDA_ARRAY3D_DESCRIPTOR* desc,
                                              unsigned int numLevels);
using cuMipmappedArrayDestroy_t = CUresult (*)(CUmipmappedArray handle);
using cuMemGetInfo_v2_t = CUresult (*)(size_t* free, size_t* total);
using cuMemGetAddressRange_v2_t = CUresult (*)(CUdeviceptr* base, size_t* size, CUdeviceptr dptr);
using cuLaunchKernel_t = CUresult (*)(CUfunction f, unsigned int gridX, unsigned int gridY,
                                      unsigned int gridZ, unsigned int blockX, unsigned int blockY,
                                      unsigned int blockZ, unsigned int sharedMemBytes,
                                      CUstream stream, void** kernelParams, void** extra);
using cuStreamCreate_t = CUresult (*)(CUstream* stream, unsigned int flags);
using cuStreamDestroy_v2_t = CUresult (*)(CUstream stream);
using cuStreamSynchronize_t = CUresult (*)(CUstream stream);
using cuStreamQuery_t = CUresult (*)(CUstream stream);
using cuStreamWaitEvent_t = CUresult (*)(CUstream stream, CUevent event, unsigned int flags);
using cuEventCreate_t = CUresult (*)(CUevent* event, unsigned int flags);
using cuEventDestroy_t = CUresult (*)(CUevent event);
using cuEventDestroy_v2_t = CUresult (*)(CUevent event);
using cuEventRecord_t = CUresult (*)(CUevent event, CUstream stream);
using cuEventRecordWithFlags_t = CUresult (*)(CUevent event, CUstream stream, unsigned int flags);
using cuEventQuery_t = CUresult (*)(CUevent event);
using cuEventSynchronize_t = CUresult (*)(CUevent event);
using cuEventElapsedTime_t = CUresult (*)(float* milliseconds, CUevent start, CUevent end);
using cuEventElapsedTime_v2_t = CUresult (*)(float* milliseconds, CUevent start, CUevent end);
using cuLaunchKernelEx_t = CUresult (*)(const CUlaunchConfig* config, CUfunction f,
                                        void** kernelParams, void** extra);
using cuLaunchCooperativeKernel_t = CUresult (*)(CUfunction f, unsigned int gridDimX,
                                                 unsigned int gridDimY, unsigned int gridDimZ,
                                                 unsigned int blockDimX, unsigned int blockDimY,
                                                 unsigned int blockDimZ,
                                                 unsigned int sharedMemBytes, CUstream stream,
                                                 void** kernelParams);
using cuGraphCreate_t = CUresult (*)(CUgraph* graph, unsigned int flags);
using cuGraphAddKernelNode_t = CUresult (*)(CUgraphNode* node, CUgraph graph,
                                            const CUgraphNode* dependencies, size_t numDependencies,
                                            const CUDA_KERNEL_NODE_PARAMS_v1* nodeParams);
using cuGraphAddKernelNode_v2_t = CUresult (*)(CUgraphNode* node, CUgraph graph,
                                               const CUgraphNode* dependencies,
                                               size_t numDependencies,
                                               const CUDA_KERNEL_NODE_PARAMS_v2* nodeParams);
using cuStreamBeginCapture_t = CUresult (*)(CUstream stream);
using cuStreamBeginCapture_v2_t = CUresult (*)(CUstream stream, CUstreamCaptureMode mode);
using cuStreamEndCapture_t = CUresult (*)(CUstream stream, CUgraph* graph);
using cuStreamIsCapturing_t = CUresult (*)(CUstream stream, CUstreamCaptureStatus* status);
using cuGraphInstantiateWithFlags_t = CUresult (*)(CUgraphExec* exec, CUgraph graph,
                                                   unsigned long long flags);
using cuGraphLaunch_t = CUresult (*)(CUgraphExec exec, CUstream stream);
using cuGraphExecDestroy_t = CUresult (*)(CUgraphExec exec);
using cuGraphDestroy_t = CUresult (*)(CUgraph graph);
using cuModuleLoadData_t = CUresult (*)(CUmodule* module, const void* image);
using cuModuleUnload_t = CUresult (*)(CUmodule module);
using cuModuleGetFunction_t = CUresult (*)(CUfunction* fn, CUmodule module, const char* name);
using cuGetErrorString_t = CUresult (*)(CUresult error, const char** str);
using cuGetErrorName_t = CUresult (*)(CUresult error, const char** str);
// The legacy entry points from before CUDA 3.2 (32-bit pointers and sizes), still exported by
// the driver: cuGetProcAddress hands them to callers asking for a cudaVersion below 3020. cuda.h
// declares them only under __CUDA_API_VERSION_INTERNAL (and cudaTypedefs.h as PFN_*_v2000).
using CUdeviceptr_v1 = unsigned int;
struct CUDA_ARRAY_DESCRIPTOR_v1 {
  unsigned int Width;
  unsigned int Height;
  CUarray_format Format;
  unsigned int NumChannels;
};
struct CUDA_ARRAY3D_DESCRIPTOR_v1 {
  unsigned int Width;
  unsigned int Height;
  unsigned int Depth;
  CUarray_format Format;
  unsigned int NumChannels;
  unsigned int Flags;
};
using cuDeviceTotalMem_t = CUresult (*)(unsigned int* bytes, CUdevice dev);
using cuCtxCreate_t = CUresult (*)(CUcontext* pctx, unsigned int flags, CUdevice dev);
using cuMemAlloc_t = CUresult (*)(CUdeviceptr_v1* dptr, unsigned int bytesize);
using cuMemAllocPitch_t = CUresult (*)(CUdeviceptr_v1* dptr, unsigned int* pitch,
                                       unsigned int widthInBytes, unsigned int height,
                                       unsigned int elementSizeBytes);
using cuMemFree_t = CUresult (*)(CUdeviceptr_v1 dptr);
using cuMemGetInfo_t = CUresult (*)(unsigned int* free, unsigned int* total);
using cuArrayCreate_t = CUresult (*)(CUarray* handle, const CUDA_ARRAY_DESCRIPTOR_v1* desc);
using cuArray3DCreate_t = CUresult (*)(CUarray* handle, const CUDA_ARRAY3D_DESCRIPTOR_v1* desc);
// cuGetProcAddress is the CUDA 11.3-11.8 form; CUDA 12.0 added the status out-parameter (_v2).
using cuGetProcAddress_t = CUresult (*)(const char* symbol, void** pfn, int cudaVersion,
                                        cuuint64_t flags);
using cuGetProcAddress_v2_t = CUresult (*)(const char* symbol, void** pfn, int cudaVersion,
                                           cuuint64_t flags,
                                           CUdriverProcAddressQueryResult* symbolStatus);

}  // namespace gpufrac::abi
