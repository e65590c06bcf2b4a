// CUDA_VISIBLE_DEVICES as the real driver reads it: a comma-separated list of physical indices,
// GPU UUIDs or MIG device UUIDs (unique prefixes allowed) that selects and orders the devices a
// process sees.
#pragma once

#include <string>
#include <vector>

namespace gpufrac::simgpu {

// What the entries can name.
struct DeviceNames {
  std::vector<std::string> gpu_uuids;  // "GPU-...", by physical index
  std::vector<bool> mig_enabled;       // by physical index
  struct Mig {
    int physical = 0;
    std::string uuid;  // "MIG-..."
  };
  std::vector<Mig> migs;  // every MIG device, by GPU, then GPU instance, then compute instance
};

// One visible device: a whole GPU (mig < 0) or the MIG device names.migs[mig] on it.
struct VisibleDeviceRef {
  int physical = 0;
  int mig = -1;
};

// The visible devices in CUDA ordinal order. `value` is the variable's value or nullptr when
// unset. As with the real driver a process sees at most one MIG device, and a GPU in MIG mode is
// not a CUDA device itself:
//  - unset: every GPU not in MIG mode, plus the first MIG device (at its GPU's position);
//  - a list ends at the first entry that is not a valid, unused index, GPU UUID prefix or MIG
//    UUID prefix matching exactly one device, that names a GPU in MIG mode, or that names a
//    second MIG device; "" hides everything.
std::vector<VisibleDeviceRef> ParseVisibleDevices(const char* value, const DeviceNames& names);

// The devices of an MPS client whose server exposes `exposed`: as NVIDIA documents, the server
// remaps its devices, so the client's own CUDA_VISIBLE_DEVICES (`value`) picks among them by
// position or by UUID prefix, with the same rules for ending the list; unset keeps them all.
std::vector<VisibleDeviceRef> RemapVisibleDevices(const char* value,
                                                  const std::vector<VisibleDeviceRef>& exposed,
                                                  const DeviceNames& names);

}  // namespace gpufrac::simgpu
