// Loading NVML at run time, one way for every user in the gpu module (device discovery, MIG
// control, health): a session that loads the library and initialises NVML, symbol lookup and
// NVML's error text, with one-line errors that say what to install or update.
#pragma once

#include <dlfcn.h>

#include <memory>
#include <string>

#include "abi/nvml_abi.h"
#include "common/status.h"

namespace gpufrac::gpu {

// One use of NVML: the library loaded with dlopen and nvmlInit_v2 called. The destructor pairs
// the init with nvmlShutdown and closes the library, so an error anywhere after Open releases
// both. NVML counts inits, so sessions may overlap.
class NvmlSession {
 public:
  // Loads `library` (a path, or a name the dynamic loader resolves) and initialises NVML.
  // `needed_for` names the feature in "driver too old" errors ("MIG control"). Errors:
  // kUnavailable "no NVIDIA driver found (...)" with what to do when the library cannot be
  // loaded; as Resolve when it lacks nvmlInit_v2, nvmlShutdown or nvmlErrorString; as CallError
  // when nvmlInit_v2 fails.
  static StatusOr<std::unique_ptr<NvmlSession>> Open(const std::string& library,
                                                     std::string needed_for);
  ~NvmlSession();
  NvmlSession(const NvmlSession&) = delete;
  NvmlSession& operator=(const NvmlSession&) = delete;

  // The library's name as given to Open, for messages.
  const std::string& library_name() const { return library_name_; }

  // dlsym of `symbol` into *out. kFailedPrecondition "<library> has no <symbol>; the NVIDIA
  // driver is too old for <needed_for> (update it)" when the driver lacks it.
  template <typename Fn>
  Status Resolve(const char* symbol, Fn* out) const {
    *out = reinterpret_cast<Fn>(dlsym(library_, symbol));
    if (*out != nullptr) return OkStatus();
    return MissingSymbol(symbol);
  }

  // "Insufficient Permissions (NVML error 4)": nvmlErrorString's text and the code.
  std::string ErrorText(abi::nvmlReturn_t rc) const;

  // A failed NVML call as a Status whose message names `call` (e.g. "nvmlDeviceGetName(GPU 1)")
  // and the error: kUnavailable when the kernel driver is not loaded or the GPU is lost (saying
  // what to do), kPermissionDenied, else kInternal.
  Status CallError(abi::nvmlReturn_t rc, const std::string& call) const;

 private:
  NvmlSession(void* library, std::string library_name, std::string needed_for);
  Status MissingSymbol(const char* symbol) const;

  void* library_;
  std::string library_name_;
  std::string needed_for_;
  abi::nvmlShutdown_t shutdown_ = nullptr;  // Set once nvmlInit_v2 succeeded.
  abi::nvmlErrorString_t error_string_ = nullptr;
};

}  // namespace gpufrac::gpu
