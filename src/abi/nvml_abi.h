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
  NVML_ERROR_FUNCTION_NOT_FOUND = 13,
  NVML_ERROR_GPU_IS_LOST = 15,
  NVML_ERROR_IN_USE = 19,
  NVML_ERROR_MEMORY = 20,
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
using nvmlDeviceGetHandleByUUID_t = nvmlReturn_t (*)(const char* uuid, nvmlDevice_t* device);
using nvmlDeviceGetIndex_t = nvmlReturn_t (*)(nvmlDevice_t device, unsigned int* index);
using nvmlDeviceGetName_t = nvmlReturn_t (*)(nvmlDevice_t device, char* name, unsigned int length);
using nvmlDeviceGetUUID_t = nvmlReturn_t (*)(nvmlDevice_t device, char* uuid, unsigned int length);
using nvmlDeviceGetMemoryInfo_t = nvmlReturn_t (*)(nvmlDevice_t device, nvmlMemory_t* memory);
using nvmlDeviceGetMemoryInfo_v2_t = nvmlReturn_t (*)(nvmlDevice_t device, nvmlMemory_v2_t* memory);

}  // namespace gpufrac::abi
