// Discovery of this machine's GPUs through NVML, which is loaded at run time with dlopen (never
// linked) so that gpufrac starts, and says why, on machines without an NVIDIA driver.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "gpu/catalogue.h"

namespace gpufrac::gpu {

// One physical GPU as NVML reports it.
struct DeviceInfo {
  unsigned index = 0;         // NVML index (the order nvidia-smi uses, not CUDA's).
  std::string uuid;           // "GPU-8f6a1b2c-..."; stable across reboots, unlike the index.
  std::string name;           // NVML product name, e.g. "NVIDIA H100 80GB HBM3".
  uint64_t memory_total = 0;  // Bytes.
  uint64_t memory_free = 0;   // Bytes, at the time of the call.
  // The catalogue entry whose NVML name equals `name`, or null for a GPU the catalogue lacks.
  // Points into the catalogue's static data: valid for the life of the process.
  const GpuModel* model = nullptr;
};

// The name ListDevices() dlopens.
inline constexpr const char kNvmlLibraryName[] = "libnvidia-ml.so.1";

// Lists every GPU NVML sees, ordered by index. NVML is initialised for the call and shut down
// again before returning. Errors:
//  - kUnavailable "no NVIDIA driver found (libnvidia-ml.so.1 could not be loaded); ..." when
//    the library cannot be loaded, or when NVML says the kernel driver is not loaded;
//  - kFailedPrecondition when the library lacks an entry point we need (driver too old);
//  - kPermissionDenied, kUnavailable (GPU lost) or kInternal when an NVML call fails; the
//    message names the call and GPU and includes nvmlErrorString's text.
// Any failure fails the whole list: a partial list would hide a broken GPU.
StatusOr<std::vector<DeviceInfo>> ListDevices();

// As ListDevices(), loading NVML from `library` (a path, or a name the dynamic loader resolves)
// instead of libnvidia-ml.so.1. For tests and for installs that keep NVML off the library path.
StatusOr<std::vector<DeviceInfo>> ListDevices(const std::string& library);

// Picks the device a user named: an index ("0", matched against DeviceInfo::index, not the
// position in `devices`) or a UUID ("GPU-8f6a..."), case-insensitive; a UUID may be shortened
// to any prefix longer than "GPU-" that matches exactly one device. Surrounding whitespace is
// ignored. Errors: kInvalidArgument for empty text, text that is neither an index nor starts
// with "GPU-", or an ambiguous prefix; kNotFound when no GPU has that index or UUID. Messages
// list the GPUs there are.
StatusOr<DeviceInfo> FindDevice(const std::vector<DeviceInfo>& devices,
                                std::string_view index_or_uuid);

}  // namespace gpufrac::gpu
