// Deterministic identities of simulated devices: the same namespace and index always give the
// same UUID (and with it the same board serial number), so tests and tools can predict them
// without asking the driver; PCI bus numbers follow the physical index.
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

// The PCI bus of physical GPU `index` (domain 0, device 0, function 0), spread like those of an
// 8- or 16-GPU server.
inline int PciBusNumber(int index) { return 0x10 + 0x0e * index; }

// The board serial number NVML reports for the GPU with this UUID: 13 decimal digits, as on
// NVIDIA's data-center boards.
std::string BoardSerial(const Uuid& gpu);

}  // namespace gpufrac::simgpu
