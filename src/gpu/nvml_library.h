// Loading NVML at run time, one way for every user in the gpu module (device discovery, MIG
// control, health): dlopen, and the one-line error that says what to install when it fails.
#pragma once

#include <string>

#include "common/status.h"

namespace gpufrac::gpu {

// dlopen(library) with RTLD_NOW | RTLD_LOCAL. kUnavailable "no NVIDIA driver found (...)" with
// what to do when it cannot be loaded (dlerror's text goes to the debug log).
StatusOr<void*> OpenNvmlLibrary(const std::string& library);

}  // namespace gpufrac::gpu
