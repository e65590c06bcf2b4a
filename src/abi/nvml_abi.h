// Our own declarations of the NVML subset gpufrac calls or interposes: real signatures, enum
// values and struct layouts, so nothing in the build needs nvml.h or the CUDA toolkit.
#pragma once

#include <cstddef>

namespace gpufrac::abi {

enum nvmlReturn_t : int {
  NVML_SUCCESS = 0,
  NVML_ERROR_UNINITIALIZED = 1,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_NO_PERMISSION = 4,
  NVML_ERROR_ALREADY_INITIALIZED = 5,
  NVML_ERROR_NOT_FOUND = 6,
  NVML_ERROR_INSUFFICIENT_SIZE = 7,
  NVML_ERROR_DRIVER_NOT_LOADED = 9,
  NVML_ERROR_TIMEOUT = 10,
  NVML_ERROR_FUNCTION_NOT_FOUND = 13,
  NVML_ERROR_GPU_IS_LOST = 15,
  NVML_ERROR_RESET_REQUIRED = 16,
  NVML_ERROR_IN_USE = 19,
  NVML_ERROR_MEMORY = 20,
  NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
  NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
  NVML_ERROR_UNKNOWN = 999,
};

struct nvmlDevice_st;
using nvmlDevice_t = nvmlDevice_st*;

struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

// nvmlDeviceGetUtilizationRates: percent of the last sample period during which a kernel ran
// (gpu) and during which device memory was read or written (memory).
struct nvmlUtilization_t {
  unsigned int gpu;
  unsigned int memory;
};

// nvmlDeviceGetProcessUtilization: one process's utilisation over one sample period, in percent
// (sm: time a kernel of it ran), and when the sample was taken (CPU time, microseconds since the
// Unix epoch).
struct nvmlProcessUtilizationSample_t {
  unsigned int pid;
  unsigned long long timeStamp;
  unsigned int smUtil;
  unsigned int memUtil;
  unsigned int encUtil;
  unsigned int decUtil;
};
static_assert(sizeof(nvmlProcessUtilizationSample_t) == 32 &&
                  offsetof(nvmlProcessUtilizationSample_t, smUtil) == 16,
              "nvmlProcessUtilizationSample_t must match nvml.h");

struct nvmlMemory_v2_t {
  unsigned int version;
  unsigned long long total;
  unsigned long long reserved;
  unsigned long long free;
  unsigned long long used;
};

// NVML_STRUCT_VERSION(Memory, 2): the struct size in the low bits, the version in the top byte.
constexpr unsigned int kNvmlMemoryV2Version =
    static_cast<unsigned int>(sizeof(nvmlMemory_v2_t)) | (2u << 24);

// NVML_STRUCT_VERSION(data, ver) for any versioned struct type.
template <typename T>
constexpr unsigned int NvmlStructVersion(unsigned int version) {
  return static_cast<unsigned int>(sizeof(T)) | (version << 24);
}

constexpr unsigned int kNvmlDeviceUuidV2BufferSize = 96;
constexpr unsigned int kNvmlDeviceNameV2BufferSize = 96;
constexpr unsigned int kNvmlSystemDriverVersionBufferSize = 80;

using nvmlInit_v2_t = nvmlReturn_t (*)();
using nvmlInitWithFlags_t = nvmlReturn_t (*)(unsigned int flags);
using nvmlShutdown_t = nvmlReturn_t (*)();
using nvmlErrorString_t = const char* (*)(nvmlReturn_t result);
using nvmlSystemGetDriverVersion_t = nvmlReturn_t (*)(char* version, unsigned int length);
using nvmlSystemGetCudaDriverVersion_t = nvmlReturn_t (*)(int* version);
using nvmlDeviceGetCount_v2_t = nvmlReturn_t (*)(unsigned int* count);
using nvmlDeviceGetHandleByIndex_v2_t = nvmlReturn_t (*)(unsigned int index, nvmlDevice_t* device);
// The v1 forms, kept in the library for old binaries: they skip devices NVML has no permission
// to talk to (the _v2 count includes them and their handle is NVML_ERROR_NO_PERMISSION).
using nvmlDeviceGetCount_t = nvmlReturn_t (*)(unsigned int* count);
using nvmlDeviceGetHandleByIndex_t = nvmlReturn_t (*)(unsigned int index, nvmlDevice_t* device);
using nvmlDeviceGetHandleByUUID_t = nvmlReturn_t (*)(const char* uuid, nvmlDevice_t* device);
// "domain:bus:device.function", "domain:bus:device" or "bus:device.function", in hex.
using nvmlDeviceGetHandleByPciBusId_v2_t = nvmlReturn_t (*)(const char* pciBusId,
                                                            nvmlDevice_t* device);
using nvmlDeviceGetHandleByPciBusId_t = nvmlReturn_t (*)(const char* pciBusId,
                                                         nvmlDevice_t* device);
using nvmlDeviceGetHandleBySerial_t = nvmlReturn_t (*)(const char* serial, nvmlDevice_t* device);
using nvmlDeviceGetSerial_t = nvmlReturn_t (*)(nvmlDevice_t device, char* serial,
                                               unsigned int length);
constexpr unsigned int kNvmlDeviceSerialBufferSize = 30;

// nvmlDeviceGetHandleByUUIDV's argument: a UUID as text ("GPU-..."/"MIG-...") or as 16 bytes.
constexpr unsigned int NVML_UUID_TYPE_ASCII = 1;
constexpr unsigned int NVML_UUID_TYPE_BINARY = 2;
struct nvmlUUID_t {
  unsigned int version;  // kNvmlUuidV1Version
  unsigned int type;     // NVML_UUID_TYPE_ASCII or NVML_UUID_TYPE_BINARY
  union {
    char str[41];
    unsigned char bytes[16];
  } value;
};
static_assert(sizeof(nvmlUUID_t) == 52, "nvmlUUID_t must match nvml.h");
constexpr unsigned int kNvmlUuidV1Version = NvmlStructVersion<nvmlUUID_t>(1);  // 0x1000034
using nvmlDeviceGetHandleByUUIDV_t = nvmlReturn_t (*)(const nvmlUUID_t* uuid, nvmlDevice_t* device);
using nvmlDeviceGetIndex_t = nvmlReturn_t (*)(nvmlDevice_t device, unsigned int* index);
using nvmlDeviceGetName_t = nvmlReturn_t (*)(nvmlDevice_t device, char* name, unsigned int length);
using nvmlDeviceGetUUID_t = nvmlReturn_t (*)(nvmlDevice_t device, char* uuid, unsigned int length);
using nvmlDeviceGetMemoryInfo_t = nvmlReturn_t (*)(nvmlDevice_t device, nvmlMemory_t* memory);
using nvmlDeviceGetMemoryInfo_v2_t = nvmlReturn_t (*)(nvmlDevice_t device, nvmlMemory_v2_t* memory);
using nvmlDeviceGetUtilizationRates_t = nvmlReturn_t (*)(nvmlDevice_t device,
                                                         nvmlUtilization_t* utilization);
// Samples newer than `lastSeenTimeStamp` (0: all the driver keeps), one per process with work in
// the last sample period. A null `utilization` (or too small a `*processSamplesCount`) answers
// NVML_ERROR_INSUFFICIENT_SIZE with the count needed; none newer: NVML_ERROR_NOT_FOUND.
using nvmlDeviceGetProcessUtilization_t =
    nvmlReturn_t (*)(nvmlDevice_t device, nvmlProcessUtilizationSample_t* utilization,
                     unsigned int* processSamplesCount, unsigned long long lastSeenTimeStamp);

// ---- Running processes ---------------------------------------------------------------------
// nvmlDeviceGetComputeRunningProcesses (v1, no suffix) fills the legacy layout. _v2 and _v3 fill
// nvmlProcessInfo_v2_t, which nvml.h also names nvmlProcessInfo_t. (The 535.43-535.86 drivers'
// headers briefly gave _v3 a 32-byte struct with usedGpuCcProtectedMemory; 535.98 reverted it.
// _v2 has kept the 24-byte layout on every driver that exports it.)

// nvmlProcessInfo_v2_t's gpuInstanceId / computeInstanceId when MIG is off.
constexpr unsigned int kNvmlProcessNoInstanceId = 0xFFFFFFFFu;

struct nvmlProcessInfo_v1_t {
  unsigned int pid;
  unsigned long long usedGpuMemory;
};

struct nvmlProcessInfo_v2_t {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;      // The process's GPU instance in MIG mode, else 0xFFFFFFFF.
  unsigned int computeInstanceId;  // Likewise its compute instance.
};
using nvmlProcessInfo_t = nvmlProcessInfo_v2_t;
static_assert(sizeof(nvmlProcessInfo_v1_t) == 16 && sizeof(nvmlProcessInfo_v2_t) == 24 &&
                  offsetof(nvmlProcessInfo_v2_t, gpuInstanceId) == 16,
              "nvmlProcessInfo_t must match nvml.h");

// Processes with a compute context on `device` (a GPU or a MIG device). Call with *infoCount = 0
// (infos may then be null) to learn the count: NVML_ERROR_INSUFFICIENT_SIZE and the count in
// *infoCount, or NVML_SUCCESS when there are none. A count too small for the list is answered
// the same way; otherwise *infoCount becomes the number of entries filled.
using nvmlDeviceGetComputeRunningProcesses_t = nvmlReturn_t (*)(nvmlDevice_t device,
                                                                unsigned int* infoCount,
                                                                nvmlProcessInfo_v1_t* infos);
using nvmlDeviceGetComputeRunningProcesses_v2_t = nvmlReturn_t (*)(nvmlDevice_t device,
                                                                   unsigned int* infoCount,
                                                                   nvmlProcessInfo_v2_t* infos);
using nvmlDeviceGetComputeRunningProcesses_v3_t = nvmlReturn_t (*)(nvmlDevice_t device,
                                                                   unsigned int* infoCount,
                                                                   nvmlProcessInfo_t* infos);

// ---- Multi-Instance GPU (MIG) ------------------------------------------------------------------
// Values of nvml.h's MIG defines (macros there; constants here).

constexpr unsigned int NVML_DEVICE_MIG_DISABLE = 0x0;
constexpr unsigned int NVML_DEVICE_MIG_ENABLE = 0x1;

// GPU instance profile ids (nvmlDeviceGetGpuInstanceProfileInfo's `profile`). The GFX, NO_ME and
// ALL_ME ids were added in CUDA 12.8-era headers, which raised the count from 0xA to 0x11.
constexpr unsigned int NVML_GPU_INSTANCE_PROFILE_1_SLICE = 0x0;
constexpr unsigned int NVML_GPU_INSTANCE_PROFILE_2_SLICE = 0x1;
constexpr unsigned int NVML_GPU_INSTANCE_PROFILE_3_SLICE = 0x2;
constexpr unsigned int NVML_GPU_INSTANCE_PROFILE_4_SLICE = 0x3;
constexpr unsigned int NVML_GPU_INSTANCE_PROFILE_7_SLICE = 0x4;
constexpr unsigned int NVML_GPU_INSTANCE_PROFILE_8_SLICE = 0x5;
constexpr unsigned int NVML_GPU_INSTANCE_PROFILE_6_SLICE = 0x6;
constexpr unsigned int NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1 = 0x7;
constexpr unsigned int NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1 = 0x8;
constexpr unsigned int NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2 = 0x9;
constexpr unsigned int NVML_GPU_INSTANCE_PROFILE_1_SLICE_GFX = 0xA;
constexpr unsigned int NVML_GPU_INSTANCE_PROFILE_2_SLICE_GFX = 0xB;
constexpr unsigned int NVML_GPU_INSTANCE_PROFILE_4_SLICE_GFX = 0xC;
constexpr unsigned int NVML_GPU_INSTANCE_PROFILE_1_SLICE_NO_ME = 0xD;
constexpr unsigned int NVML_GPU_INSTANCE_PROFILE_2_SLICE_NO_ME = 0xE;
constexpr unsigned int NVML_GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME = 0xF;
constexpr unsigned int NVML_GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME = 0x10;
constexpr unsigned int NVML_GPU_INSTANCE_PROFILE_COUNT = 0x11;

// Compute instance profile ids and the one engine profile.
constexpr unsigned int NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE = 0x0;
constexpr unsigned int NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE = 0x1;
constexpr unsigned int NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE = 0x2;
constexpr unsigned int NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE = 0x3;
constexpr unsigned int NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE = 0x4;
constexpr unsigned int NVML_COMPUTE_INSTANCE_PROFILE_8_SLICE = 0x5;
constexpr unsigned int NVML_COMPUTE_INSTANCE_PROFILE_6_SLICE = 0x6;
constexpr unsigned int NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE_REV1 = 0x7;
constexpr unsigned int NVML_COMPUTE_INSTANCE_PROFILE_COUNT = 0x8;
constexpr unsigned int NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED = 0x0;

struct nvmlGpuInstance_st;
using nvmlGpuInstance_t = nvmlGpuInstance_st*;
struct nvmlComputeInstance_st;
using nvmlComputeInstance_t = nvmlComputeInstance_st*;

// Where a GPU instance sits, in memory slices.
struct nvmlGpuInstancePlacement_t {
  unsigned int start;
  unsigned int size;
};

struct nvmlGpuInstanceProfileInfo_t {
  unsigned int id;
  unsigned int isP2pSupported;
  unsigned int sliceCount;
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int copyEngineCount;
  unsigned int decoderCount;
  unsigned int encoderCount;
  unsigned int jpegCount;
  unsigned int ofaCount;
  unsigned long long memorySizeMB;
};

// Not layout-compatible with v1: a version word first, the profile name last.
struct nvmlGpuInstanceProfileInfo_v2_t {
  unsigned int version;
  unsigned int id;
  unsigned int isP2pSupported;
  unsigned int sliceCount;
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int copyEngineCount;
  unsigned int decoderCount;
  unsigned int encoderCount;
  unsigned int jpegCount;
  unsigned int ofaCount;
  unsigned long long memorySizeMB;
  char name[kNvmlDeviceNameV2BufferSize];
};

// nvmlGpuInstanceProfileInfo_v2.
constexpr unsigned int kNvmlGpuInstanceProfileInfoV2Version =
    NvmlStructVersion<nvmlGpuInstanceProfileInfo_v2_t>(2);

struct nvmlGpuInstanceInfo_t {
  nvmlDevice_t device;
  unsigned int id;
  unsigned int profileId;
  nvmlGpuInstancePlacement_t placement;
};

// Where a compute instance sits inside its GPU instance, in compute slices.
struct nvmlComputeInstancePlacement_t {
  unsigned int start;
  unsigned int size;
};

struct nvmlComputeInstanceProfileInfo_t {
  unsigned int id;
  unsigned int sliceCount;
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int sharedCopyEngineCount;
  unsigned int sharedDecoderCount;
  unsigned int sharedEncoderCount;
  unsigned int sharedJpegCount;
  unsigned int sharedOfaCount;
};

struct nvmlComputeInstanceProfileInfo_v2_t {
  unsigned int version;
  unsigned int id;
  unsigned int sliceCount;
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int sharedCopyEngineCount;
  unsigned int sharedDecoderCount;
  unsigned int sharedEncoderCount;
  unsigned int sharedJpegCount;
  unsigned int sharedOfaCount;
  char name[kNvmlDeviceNameV2BufferSize];
};

// nvmlComputeInstanceProfileInfo_v2.
constexpr unsigned int kNvmlComputeInstanceProfileInfoV2Version =
    NvmlStructVersion<nvmlComputeInstanceProfileInfo_v2_t>(2);

struct nvmlComputeInstanceInfo_t {
  nvmlDevice_t device;
  nvmlGpuInstance_t gpuInstance;
  unsigned int id;
  unsigned int profileId;
  nvmlComputeInstancePlacement_t placement;
};

using nvmlDeviceSetMigMode_t = nvmlReturn_t (*)(nvmlDevice_t device, unsigned int mode,
                                                nvmlReturn_t* activationStatus);
using nvmlDeviceGetMigMode_t = nvmlReturn_t (*)(nvmlDevice_t device, unsigned int* currentMode,
                                                unsigned int* pendingMode);
using nvmlDeviceGetGpuInstanceProfileInfo_t = nvmlReturn_t (*)(nvmlDevice_t device,
                                                               unsigned int profile,
                                                               nvmlGpuInstanceProfileInfo_t* info);
using nvmlDeviceGetGpuInstanceProfileInfoV_t = nvmlReturn_t (*)(
    nvmlDevice_t device, unsigned int profile, nvmlGpuInstanceProfileInfo_v2_t* info);
using nvmlDeviceGetGpuInstancePossiblePlacements_v2_t =
    nvmlReturn_t (*)(nvmlDevice_t device, unsigned int profileId,
                     nvmlGpuInstancePlacement_t* placements, unsigned int* count);
using nvmlDeviceGetGpuInstanceRemainingCapacity_t = nvmlReturn_t (*)(nvmlDevice_t device,
                                                                     unsigned int profileId,
                                                                     unsigned int* count);
using nvmlDeviceCreateGpuInstance_t = nvmlReturn_t (*)(nvmlDevice_t device, unsigned int profileId,
                                                       nvmlGpuInstance_t* gpuInstance);
using nvmlDeviceCreateGpuInstanceWithPlacement_t =
    nvmlReturn_t (*)(nvmlDevice_t device, unsigned int profileId,
                     const nvmlGpuInstancePlacement_t* placement, nvmlGpuInstance_t* gpuInstance);
using nvmlGpuInstanceDestroy_t = nvmlReturn_t (*)(nvmlGpuInstance_t gpuInstance);
using nvmlDeviceGetGpuInstances_t = nvmlReturn_t (*)(nvmlDevice_t device, unsigned int profileId,
                                                     nvmlGpuInstance_t* gpuInstances,
                                                     unsigned int* count);
using nvmlDeviceGetGpuInstanceById_t = nvmlReturn_t (*)(nvmlDevice_t device, unsigned int id,
                                                        nvmlGpuInstance_t* gpuInstance);
using nvmlGpuInstanceGetInfo_t = nvmlReturn_t (*)(nvmlGpuInstance_t gpuInstance,
                                                  nvmlGpuInstanceInfo_t* info);
using nvmlGpuInstanceGetComputeInstanceProfileInfo_t =
    nvmlReturn_t (*)(nvmlGpuInstance_t gpuInstance, unsigned int profile, unsigned int engProfile,
                     nvmlComputeInstanceProfileInfo_t* info);
using nvmlGpuInstanceGetComputeInstanceProfileInfoV_t =
    nvmlReturn_t (*)(nvmlGpuInstance_t gpuInstance, unsigned int profile, unsigned int engProfile,
                     nvmlComputeInstanceProfileInfo_v2_t* info);
using nvmlGpuInstanceCreateComputeInstance_t = nvmlReturn_t (*)(
    nvmlGpuInstance_t gpuInstance, unsigned int profileId, nvmlComputeInstance_t* computeInstance);
using nvmlComputeInstanceDestroy_t = nvmlReturn_t (*)(nvmlComputeInstance_t computeInstance);
using nvmlGpuInstanceGetComputeInstances_t =
    nvmlReturn_t (*)(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                     nvmlComputeInstance_t* computeInstances, unsigned int* count);
using nvmlGpuInstanceGetComputeInstanceById_t = nvmlReturn_t (*)(
    nvmlGpuInstance_t gpuInstance, unsigned int id, nvmlComputeInstance_t* computeInstance);
// nvml.h maps the unversioned nvmlComputeInstanceGetInfo to _v2; the v1 symbol has the same
// signature.
using nvmlComputeInstanceGetInfo_t = nvmlReturn_t (*)(nvmlComputeInstance_t computeInstance,
                                                      nvmlComputeInstanceInfo_t* info);
using nvmlComputeInstanceGetInfo_v2_t = nvmlComputeInstanceGetInfo_t;
using nvmlDeviceIsMigDeviceHandle_t = nvmlReturn_t (*)(nvmlDevice_t device,
                                                       unsigned int* isMigDevice);
using nvmlDeviceGetGpuInstanceId_t = nvmlReturn_t (*)(nvmlDevice_t device, unsigned int* id);
using nvmlDeviceGetComputeInstanceId_t = nvmlReturn_t (*)(nvmlDevice_t device, unsigned int* id);
using nvmlDeviceGetMaxMigDeviceCount_t = nvmlReturn_t (*)(nvmlDevice_t device, unsigned int* count);
using nvmlDeviceGetMigDeviceHandleByIndex_t = nvmlReturn_t (*)(nvmlDevice_t device,
                                                               unsigned int index,
                                                               nvmlDevice_t* migDevice);
using nvmlDeviceGetDeviceHandleFromMigDeviceHandle_t = nvmlReturn_t (*)(nvmlDevice_t migDevice,
                                                                        nvmlDevice_t* device);

// ---- Events --------------------------------------------------------------------------------
// Event type bits (nvml.h defines them as macros; constants here). Combine them with '|' for
// nvmlDeviceRegisterEvents; nvmlDeviceGetSupportedEventTypes says which a GPU offers (ECC events
// need ECC on).
constexpr unsigned long long nvmlEventTypeNone = 0x0ULL;
constexpr unsigned long long nvmlEventTypeSingleBitEccError = 0x1ULL;
constexpr unsigned long long nvmlEventTypeDoubleBitEccError = 0x2ULL;
constexpr unsigned long long nvmlEventTypePState = 0x4ULL;
constexpr unsigned long long nvmlEventTypeXidCriticalError = 0x8ULL;
constexpr unsigned long long nvmlEventTypeClock = 0x10ULL;  // Kepler only
constexpr unsigned long long nvmlEventTypePowerSourceChange = 0x80ULL;
constexpr unsigned long long nvmlEventMigConfigChange = 0x100ULL;

// nvmlEventData_t's gpuInstanceId / computeInstanceId when an event is not attributable to a
// MIG instance.
constexpr unsigned int kNvmlEventNoInstanceId = 0xFFFFFFFFu;
// nvmlEventData_t's eventData for an XID the driver could not identify.
constexpr unsigned long long kNvmlUnknownXid = 999;

struct nvmlEventSet_st;
using nvmlEventSet_t = nvmlEventSet_st*;

struct nvmlEventData_t {
  nvmlDevice_t device;           // The GPU the event happened on.
  unsigned long long eventType;  // One nvmlEventType* bit.
  unsigned long long eventData;  // The XID for nvmlEventTypeXidCriticalError, else 0.
  unsigned int gpuInstanceId;    // kNvmlEventNoInstanceId unless attributable to an instance.
  unsigned int computeInstanceId;
};
static_assert(sizeof(nvmlEventData_t) == 32 && offsetof(nvmlEventData_t, gpuInstanceId) == 24,
              "nvmlEventData_t must match nvml.h");

using nvmlDeviceGetSupportedEventTypes_t = nvmlReturn_t (*)(nvmlDevice_t device,
                                                            unsigned long long* eventTypes);
using nvmlDeviceRegisterEvents_t = nvmlReturn_t (*)(nvmlDevice_t device,
                                                    unsigned long long eventTypes,
                                                    nvmlEventSet_t set);
using nvmlEventSetCreate_t = nvmlReturn_t (*)(nvmlEventSet_t* set);
using nvmlEventSetWait_v2_t = nvmlReturn_t (*)(nvmlEventSet_t set, nvmlEventData_t* data,
                                               unsigned int timeoutms);
using nvmlEventSetFree_t = nvmlReturn_t (*)(nvmlEventSet_t set);

}  // namespace gpufrac::abi
