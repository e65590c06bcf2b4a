// The simulated machine as every process of a namespace sees it: a POSIX shared-memory segment
// holding the device table, each device's memory counter and one slot per attached process.
// Created by whichever process comes first; all counters are lock-free atomics.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "simgpu/config.h"

namespace gpufrac::simgpu {

inline constexpr int kMaxProcessSlots = 512;

struct SharedDevice {
  char model[32];  // catalogue short name, NUL-terminated
  std::uint64_t total_bytes;
  std::uint8_t uuid[16];
  // Device memory held by all processes of the namespace; never exceeds total_bytes.
  alignas(64) std::atomic<std::uint64_t> used_bytes;
};

// One attached driver instance (one process). `owner` packs the process identity; 0 means free.
struct ProcessSlot {
  std::atomic<std::uint64_t> owner;
  std::atomic<std::uint64_t> used_bytes[kMaxDevices];  // this process's share of each device
};

struct SharedMachine {
  std::atomic<std::uint32_t> magic;  // written last by the creator
  std::uint32_t layout_version;
  std::int32_t device_count;
  char config[256];  // canonical SIMGPU_CONFIG the machine was created with
  SharedDevice devices[kMaxDevices];
  ProcessSlot slots[kMaxProcessSlots];
};

static_assert(std::atomic<std::uint64_t>::is_always_lock_free,
              "shared counters must be address-free atomics");

// "/simgpu.<uid>.<namespace>", with characters other than [A-Za-z0-9._-] replaced by '_'.
std::string SharedMemoryName(std::string_view name_space);

// Maps the machine of `name_space`, creating and initialising it from `config` if this process
// is the first (a file lock on the segment makes creation race-free, and a creator that died
// half-way is detected and redone). If the machine exists, its own configuration wins and
// `config` is ignored. The mapping lives until the process exits. nullptr + `error` on failure.
SharedMachine* AttachSharedMachine(std::string_view name_space, const MachineConfig& config,
                                   std::string* error);

// AttachSharedMachine for the namespace and configuration named by the environment
// (SIMGPU_NAMESPACE, SIMGPU_CONFIG). Warns on stderr when SIMGPU_CONFIG is set but the machine
// already exists with another configuration (the existing one is used).
SharedMachine* AttachSharedMachineFromEnv(std::string* error);

// Removes the namespace's segment; processes that have it mapped keep using it. Returns whether
// a segment was removed.
bool RemoveSharedMachine(std::string_view name_space);

// The catalogue model of a device in the shared table; nullptr if the name is unknown to this
// build.
const gpu::GpuModel* DeviceModel(const SharedDevice& device);

}  // namespace gpufrac::simgpu
