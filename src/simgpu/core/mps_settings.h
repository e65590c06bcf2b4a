// The values MPS's control commands and environment variables take, parsed and printed in one
// place: active thread percentages ("25", "12.5"), pinned device memory limits ("2G", "900M";
// the environment variable also takes "GB"/"MB", as NVIDIA's example "0=1G,1=512MB" does) and
// the per-device lists of CUDA_MPS_PINNED_DEVICE_MEM_LIMIT.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpufrac::simgpu {

// Active thread percentages are kept in tenths of a percent; 1000 is the whole device.
inline constexpr std::uint32_t kFullThreadPercentage = 1000;

// A percentage 0 < P <= 100 with at most one decimal ("25", "25.0", "12.5"); nullopt otherwise.
std::optional<std::uint32_t> ParseThreadPercentage(std::string_view text);
// "25.0": how nvidia-cuda-mps-control prints a percentage.
std::string FormatThreadPercentage(std::uint32_t tenths);

// SMs a client may use: the device's `sm_count` scaled by the percentage and rounded down, at
// least 1 (NVIDIA rounds a percentage down to a count the hardware supports).
int ThreadPercentageSms(int sm_count, std::uint32_t tenths);

// A memory limit: a positive integer followed by G (GiB) or M (MiB); with `allow_byte_suffix`
// also GB or MB (the same units). Nullopt for anything else, or a value that overflows.
std::optional<std::uint64_t> ParseMemLimit(std::string_view text, bool allow_byte_suffix);
// "2G" for whole GiB, else whole MiB ("900M"): the form the set commands take.
std::string FormatMemLimit(std::uint64_t bytes);

// One entry of a per-device limit list: a device ordinal or UUID (prefix), and the limit.
struct DeviceMemLimit {
  std::string device;
  std::uint64_t bytes = 0;
};
// "0=1G,GPU-8f2a=512MB" (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT). False, with `error` set, when an
// entry is not DEVICE=VALUE or its value does not parse.
bool ParseDeviceMemLimits(std::string_view text, std::vector<DeviceMemLimit>* limits,
                          std::string* error);

}  // namespace gpufrac::simgpu
