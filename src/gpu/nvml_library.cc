// The NVML session: dlopen, nvmlInit_v2/nvmlShutdown and user-facing errors.
#include "gpu/nvml_library.h"

#include <dlfcn.h>

#include "common/log.h"

namespace gpufrac::gpu {

NvmlSession::NvmlSession(void* library, std::string library_name, std::string needed_for)
    : library_(library),
      library_name_(std::move(library_name)),
      needed_for_(std::move(needed_for)) {}

NvmlSession::~NvmlSession() {
  if (shutdown_ != nullptr) {
    if (auto rc = shutdown_(); rc != abi::NVML_SUCCESS) {
      LogDebug("nvmlShutdown failed: %s", ErrorText(rc).c_str());
    }
  }
  dlclose(library_);
}

StatusOr<std::unique_ptr<NvmlSession>> NvmlSession::Open(const std::string& library,
                                                         std::string needed_for) {
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    LogDebug("dlopen(%s): %s", library.c_str(), why != nullptr ? why : "unknown error");
    return UnavailableError("no NVIDIA driver found (" + library +
                            " could not be loaded); install the NVIDIA driver (nvidia-smi "
                            "should then list the GPUs), or add the directory holding " +
                            library + " to LD_LIBRARY_PATH");
  }
  std::unique_ptr<NvmlSession> session(new NvmlSession(handle, library, std::move(needed_for)));
  abi::nvmlInit_v2_t init = nullptr;
  abi::nvmlShutdown_t shutdown = nullptr;
  GPUFRAC_RETURN_IF_ERROR(session->Resolve("nvmlInit_v2", &init));
  GPUFRAC_RETURN_IF_ERROR(session->Resolve("nvmlShutdown", &shutdown));
  GPUFRAC_RETURN_IF_ERROR(session->Resolve("nvmlErrorString", &session->error_string_));
  if (auto rc = init(); rc != abi::NVML_SUCCESS) return session->CallError(rc, "nvmlInit_v2");
  session->shutdown_ = shutdown;  // from here on, the destructor pairs the init with a shutdown
  return session;
}

Status NvmlSession::MissingSymbol(const char* symbol) const {
  return FailedPreconditionError(library_name_ + " has no " + symbol +
                                 "; the NVIDIA driver is too old for " + needed_for_ +
                                 " (update it)");
}

std::string NvmlSession::ErrorText(abi::nvmlReturn_t rc) const {
  const char* text = error_string_ != nullptr ? error_string_(rc) : nullptr;
  return (text != nullptr ? text : "unknown error") + std::string(" (NVML error ") +
         std::to_string(static_cast<int>(rc)) + ")";
}

Status NvmlSession::CallError(abi::nvmlReturn_t rc, const std::string& call) const {
  std::string message = call + " failed: " + ErrorText(rc);
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
