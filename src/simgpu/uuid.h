// Deterministic GPU UUIDs for simulated devices: the same namespace and index always give the
// same UUID, so tests and tools can predict them without asking the driver.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace gpufrac::simgpu {

using Uuid = std::array<std::uint8_t, 16>;

// The UUID of physical GPU `index` in the simulated machine `name_space`.
Uuid DeviceUuid(std::string_view name_space, int index);

// The UUID of the MIG device (compute instance `compute_instance` of GPU instance
// `gpu_instance`) on the GPU whose UUID is `gpu`: the same three always give the same UUID.
Uuid MigUuid(const Uuid& gpu, int gpu_instance, int compute_instance);

// NVIDIA's text form: "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (lower-case hex).
std::string FormatGpuUuid(const Uuid& uuid);
// The same with the "MIG-" prefix drivers since R470 give MIG devices.
std::string FormatMigUuid(const Uuid& uuid);

}  // namespace gpufrac::simgpu
