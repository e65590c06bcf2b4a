// CUDA_VISIBLE_DEVICES as the real driver reads it: a comma-separated list of physical indices
// or GPU UUIDs (unique prefixes allowed) that selects and orders the devices a process sees.
#pragma once

#include <span>
#include <string>
#include <vector>

namespace gpufrac::simgpu {

// Physical indices of the visible devices, in CUDA ordinal order. `value` is the variable's
// value or nullptr when unset (all devices visible). The list ends at the first entry that is
// not a valid, unused index or a UUID prefix matching exactly one device; "" hides everything.
// `uuids` are the machine's devices' UUIDs in "GPU-..." form, by physical index.
std::vector<int> ParseVisibleDevices(const char* value, std::span<const std::string> uuids);

}  // namespace gpufrac::simgpu
