// The simulated machine's configuration, read from the environment: which GPU models it has
// (SIMGPU_CONFIG), which independent machine a process joins (SIMGPU_NAMESPACE), the driver
// version it claims (SIMGPU_DRIVER_VERSION) and the compute engine's time slice
// (SIMGPU_TIMESLICE_US).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "gpu/catalogue.h"

namespace gpufrac::simgpu {

inline constexpr int kMaxDevices = 16;
inline constexpr std::string_view kDefaultConfig = "1xH100-80GB";
inline constexpr std::string_view kDefaultNamespace = "default";
inline constexpr int kDefaultDriverVersion = 12080;  // CUDA 12.8
// The compute engine's time slice (see engine.h): a few milliseconds, as on NVIDIA GPUs.
inline constexpr std::uint64_t kDefaultTimesliceNs = 2000000;

struct MachineConfig {
  int device_count = 0;
  std::array<const gpu::GpuModel*, kMaxDevices> models{};  // by physical index
  std::array<bool, kMaxDevices> mig{};                     // MIG mode on from the start
  // How long a context may hold a compute engine while others wait (SIMGPU_TIMESLICE_US).
  std::uint64_t timeslice_ns = kDefaultTimesliceNs;
};

// Parses a comma-separated list of `[Nx]MODEL[:mig]` items, e.g. "2xH100-80GB,1xA30-24GB:mig"
// or "L4". Model names are the catalogue's short names, in any case; `:mig` starts those GPUs
// with MIG mode on and is refused for models without MIG. On failure returns false and says
// why in `error`.
bool ParseMachineConfig(std::string_view text, MachineConfig* config, std::string* error);

// The canonical text for `config`: "2xH100-80GB,1xA30-24GB:mig".
std::string FormatMachineConfig(const MachineConfig& config);

// SIMGPU_CONFIG, or kDefaultConfig when unset or empty.
std::string ConfigTextFromEnv();

// SIMGPU_NAMESPACE, or kDefaultNamespace when unset or empty.
std::string NamespaceFromEnv();

// SIMGPU_TIMESLICE_US in nanoseconds, or kDefaultTimesliceNs when unset or not a positive number
// (at most 10 s).
std::uint64_t TimesliceNsFromEnv();

// SIMGPU_DRIVER_VERSION (e.g. 13000), or kDefaultDriverVersion when unset or not a number.
int DriverVersionFromEnv();

}  // namespace gpufrac::simgpu
