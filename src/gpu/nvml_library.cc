// dlopen of NVML with a user-facing error.
#include "gpu/nvml_library.h"

#include <dlfcn.h>

#include "common/log.h"

namespace gpufrac::gpu {

StatusOr<void*> OpenNvmlLibrary(const std::string& library) {
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle != nullptr) return handle;
  const char* why = dlerror();
  LogDebug("dlopen(%s): %s", library.c_str(), why != nullptr ? why : "unknown error");
  return UnavailableError("no NVIDIA driver found (" + library +
                          " could not be loaded); install the NVIDIA driver (nvidia-smi should "
                          "then list the GPUs), or add the directory holding " +
                          library + " to LD_LIBRARY_PATH");
}

std::string NvmlErrorText(abi::nvmlErrorString_t error_string, abi::nvmlReturn_t rc) {
  const char* text = error_string != nullptr ? error_string(rc) : nullptr;
  return (text != nullptr ? text : "unknown error") + std::string(" (NVML error ") +
         std::to_string(static_cast<int>(rc)) + ")";
}

Status NvmlCallError(abi::nvmlErrorString_t error_string, abi::nvmlReturn_t rc,
                     const std::string& call) {
  std::string message = call + " failed: " + NvmlErrorText(error_string, rc);
  switch (rc) {
    case abi::NVML_ERROR_DRIVER_NOT_LOADED:
      return UnavailableError(std::move(message) +
                              "; the NVIDIA kernel driver is not loaded (does nvidia-smi work?)");
    case abi::NVML_ERROR_NO_PERMISSION:
      return PermissionDeniedError(std::move(message));
    case abi::NVML_ERROR_GPU_IS_LOST:
      return UnavailableError(std::move(message) +
                              "; the GPU has fallen off the bus and needs a reset or reboot");
    default:
      return InternalError(std::move(message));
  }
}

}  // namespace gpufrac::gpu
