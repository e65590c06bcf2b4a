// A tiny stand-in for libnvidia-ml.so.1 used only by gpu_devices_test: two GPUs and failures
// injected through environment variables, to exercise every path of ListDevices without a GPU.
//   FAKE_NVML_FAIL=<entry point>   that entry point returns FAKE_NVML_FAIL_CODE (default 999).
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "abi/nvml_abi.h"

using gpufrac::abi::nvmlDevice_t;
using gpufrac::abi::nvmlMemory_t;
using gpufrac::abi::nvmlReturn_t;

struct gpufrac::abi::nvmlDevice_st {
  const char* uuid;
  const char* name;
  unsigned long long total;
  unsigned long long free;
};

namespace {

constexpr unsigned long long kGiB = 1ull << 30;
gpufrac::abi::nvmlDevice_st g_devices[] = {
    {"GPU-11111111-2222-3333-4444-555555555555", "NVIDIA H100 80GB HBM3", 80 * kGiB, 79 * kGiB},
    {"GPU-11111111-aaaa-bbbb-cccc-dddddddddddd", "NVIDIA Imaginary GPU", 24 * kGiB, 24 * kGiB},
};
int g_init_depth = 0;

// The injected failure for `entry`, or NVML_SUCCESS.
nvmlReturn_t Injected(std::string_view entry) {
  const char* fail = std::getenv("FAKE_NVML_FAIL");
  if (fail == nullptr || entry != fail) return gpufrac::abi::NVML_SUCCESS;
  const char* code = std::getenv("FAKE_NVML_FAIL_CODE");
  return static_cast<nvmlReturn_t>(code != nullptr ? std::atoi(code) : 999);
}

nvmlReturn_t CopyString(const char* value, char* out, unsigned length) {
  if (out == nullptr) return gpufrac::abi::NVML_ERROR_INVALID_ARGUMENT;
  if (std::strlen(value) + 1 > length) return gpufrac::abi::NVML_ERROR_INSUFFICIENT_SIZE;
  std::strcpy(out, value);
  return gpufrac::abi::NVML_SUCCESS;
}

}  // namespace

extern "C" {

// Test hook: how many nvmlInit_v2 calls are not yet matched by nvmlShutdown.
int FakeNvmlInitDepth() { return g_init_depth; }

nvmlReturn_t nvmlInit_v2() {
  if (nvmlReturn_t rc = Injected("nvmlInit_v2"); rc != gpufrac::abi::NVML_SUCCESS) return rc;
  ++g_init_depth;
  return gpufrac::abi::NVML_SUCCESS;
}

nvmlReturn_t nvmlShutdown() {
  if (g_init_depth == 0) return gpufrac::abi::NVML_ERROR_UNINITIALIZED;
  --g_init_depth;
  return gpufrac::abi::NVML_SUCCESS;
}

const char* nvmlErrorString(nvmlReturn_t result) {
  switch (result) {
    case gpufrac::abi::NVML_SUCCESS:
      return "Success";
    case gpufrac::abi::NVML_ERROR_UNINITIALIZED:
      return "Uninitialized";
    case gpufrac::abi::NVML_ERROR_INVALID_ARGUMENT:
      return "Invalid Argument";
    case gpufrac::abi::NVML_ERROR_NO_PERMISSION:
      return "Insufficient Permissions";
    case gpufrac::abi::NVML_ERROR_INSUFFICIENT_SIZE:
      return "Insufficient Size";
    case gpufrac::abi::NVML_ERROR_DRIVER_NOT_LOADED:
      return "Driver Not Loaded";
    case gpufrac::abi::NVML_ERROR_GPU_IS_LOST:
      return "GPU is lost";
    default:
      return "Unknown Error";
  }
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned* count) {
  if (g_init_depth == 0) return gpufrac::abi::NVML_ERROR_UNINITIALIZED;
  if (nvmlReturn_t rc = Injected("nvmlDeviceGetCount_v2"); rc != gpufrac::abi::NVML_SUCCESS) {
    return rc;
  }
  *count = sizeof(g_devices) / sizeof(g_devices[0]);
  return gpufrac::abi::NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t* device) {
  if (g_init_depth == 0) return gpufrac::abi::NVML_ERROR_UNINITIALIZED;
  if (nvmlReturn_t rc = Injected("nvmlDeviceGetHandleByIndex_v2");
      rc != gpufrac::abi::NVML_SUCCESS) {
    return rc;
  }
  if (device == nullptr || index >= sizeof(g_devices) / sizeof(g_devices[0])) {
    return gpufrac::abi::NVML_ERROR_INVALID_ARGUMENT;
  }
  *device = &g_devices[index];
  return gpufrac::abi::NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned length) {
  if (g_init_depth == 0) return gpufrac::abi::NVML_ERROR_UNINITIALIZED;
  if (nvmlReturn_t rc = Injected("nvmlDeviceGetUUID"); rc != gpufrac::abi::NVML_SUCCESS) return rc;
  return CopyString(device->uuid, uuid, length);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned length) {
  if (g_init_depth == 0) return gpufrac::abi::NVML_ERROR_UNINITIALIZED;
  if (nvmlReturn_t rc = Injected("nvmlDeviceGetName"); rc != gpufrac::abi::NVML_SUCCESS) return rc;
  return CopyString(device->name, name, length);
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  if (g_init_depth == 0) return gpufrac::abi::NVML_ERROR_UNINITIALIZED;
  if (nvmlReturn_t rc = Injected("nvmlDeviceGetMemoryInfo"); rc != gpufrac::abi::NVML_SUCCESS) {
    return rc;
  }
  if (memory == nullptr) return gpufrac::abi::NVML_ERROR_INVALID_ARGUMENT;
  memory->total = device->total;
  memory->free = device->free;
  memory->used = device->total - device->free;
  return gpufrac::abi::NVML_SUCCESS;
}

}  // extern "C"
