// Loading NVML at run time, one way for every user in the gpu module (device discovery, MIG
// control, health): dlopen, symbol lookup and NVML's error text, with one-line errors that say
// what to install or update.
#pragma once

#include <dlfcn.h>

#include <string>
#include <string_view>

#include "abi/nvml_abi.h"
#include "common/status.h"

namespace gpufrac::gpu {

// dlopen(library) with RTLD_NOW | RTLD_LOCAL. kUnavailable "no NVIDIA driver found (...)" with
// what to do when it cannot be loaded (dlerror's text goes to the debug log).
StatusOr<void*> OpenNvmlLibrary(const std::string& library);

// dlsym(library, symbol) into *out. kFailedPrecondition "<name> has no <symbol>; the NVIDIA
// driver is too old for <needed_for> (update it)" when the driver lacks it.
template <typename Fn>
Status ResolveNvmlSymbol(void* library, const std::string& name, const char* symbol,
                         std::string_view needed_for, Fn* out) {
  *out = reinterpret_cast<Fn>(dlsym(library, symbol));
  if (*out != nullptr) return OkStatus();
  return FailedPreconditionError(name + " has no " + symbol + "; the NVIDIA driver is too old for " +
                                 std::string(needed_for) + " (update it)");
}

// "Insufficient Permissions (NVML error 4)": nvmlErrorString's text (when `error_string` is
// resolved) and the code.
std::string NvmlErrorText(abi::nvmlErrorString_t error_string, abi::nvmlReturn_t rc);

// A failed NVML call as a Status whose message names `call` (e.g. "nvmlDeviceGetName(GPU 1)")
// and the error: kUnavailable when the kernel driver is not loaded or the GPU is lost (saying
// what to do), kPermissionDenied, else kInternal.
Status NvmlCallError(abi::nvmlErrorString_t error_string, abi::nvmlReturn_t rc,
                     const std::string& call);

}  // namespace gpufrac::gpu
