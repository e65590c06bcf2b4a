// The simulated machine as every process of a namespace sees it: a POSIX shared-memory segment
// holding the device table, each device's memory counter and one slot per attached process.
// Created by whichever process comes first; all counters are lock-free atomics.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "simgpu/config.h"

namespace gpufrac::simgpu {

inline constexpr int kMaxProcessSlots = 512;
// GPU instance ids are indices into a device's instance table. Ids follow the placement (see
// mig_state.h), and a GPU of 8 memory slices has 15 possible placements of power-of-two sizes.
inline constexpr int kMaxGpuInstances = 16;
inline constexpr int kMaxComputeInstances = 8;  // per GPU instance (at most 7 compute slices)
// NVML events the machine remembers (see device_events.h); a reader that falls further behind
// loses the oldest, as NVML's own queue would.
inline constexpr int kEventLogSize = 256;

struct SharedComputeInstance {
  std::uint32_t live;  // 0: free entry
  std::uint32_t profile_id;
  std::uint32_t slice_start;  // compute slices inside the GPU instance
  std::uint32_t slice_count;
};

// One GPU instance; the entry's index in SharedDevice::gpu_instances is its NVML id. Everything
// but `used_bytes` changes only under SharedMachine::mig_mutex.
struct SharedGpuInstance {
  std::uint32_t live;        // 0: free entry
  std::uint32_t profile_id;  // the profile's NVML id (MigProfile::profile_id, e.g. 19)
  std::uint32_t start;       // placement, in memory slices
  std::uint32_t size;
  std::uint32_t compute_slices;
  std::uint32_t sm_count;
  std::uint64_t total_bytes;  // what CUDA reports as the instance's total memory
  // Bumped by every create; a process bound to an older generation is not in this instance.
  std::uint64_t generation;
  SharedComputeInstance compute[kMaxComputeInstances];  // indexed by compute instance id
  // Memory held in this instance by all processes bound to it; never exceeds total_bytes.
  alignas(64) std::atomic<std::uint64_t> used_bytes;
};

struct SharedDevice {
  char model[32];  // catalogue short name, NUL-terminated
  std::uint64_t total_bytes;
  std::uint8_t uuid[16];
  // NVML_DEVICE_MIG_DISABLE / _ENABLE; changed under SharedMachine::mig_mutex.
  std::uint32_t mig_current;
  std::uint32_t mig_pending;
  // Nonzero while the GPU "has fallen off the bus" (simgpuSetGpuLost): NVML calls on it answer
  // NVML_ERROR_GPU_IS_LOST.
  std::atomic<std::uint32_t> lost;
  // Device memory held by all processes of the namespace; never exceeds total_bytes. With MIG
  // on it is the sum of the instances' used_bytes.
  alignas(64) std::atomic<std::uint64_t> used_bytes;
  SharedGpuInstance gpu_instances[kMaxGpuInstances];
};

// One attached driver instance (one process). `owner` packs the process identity; 0 means free.
struct ProcessSlot {
  std::atomic<std::uint64_t> owner;
  std::atomic<std::uint64_t> used_bytes[kMaxDevices];  // this process's share of each device
  // The MIG device the process uses (CUDA gives a process at most one), packed by
  // PackMigBinding (mig_state.h); 0 for none. Its charges on that device are also charged to
  // the instance. Set at cuInit under mig_mutex, cleared when the slot is released.
  std::atomic<std::uint64_t> mig_binding;
};

// One NVML event (nvmlEventData_t without the process-local device handle).
struct SharedEvent {
  std::uint64_t sequence;  // position in the log since the machine was created
  std::uint64_t type;      // one nvmlEventType* bit
  std::uint64_t data;      // the XID for XID events
  std::uint32_t device;
  std::uint32_t gpu_instance_id;
  std::uint32_t compute_instance_id;
};

// Every event of the machine, in order: entry `sequence % kEventLogSize` holds event `sequence`.
// `mutex` (robust, process-shared) guards the entries and `next_sequence`; `signal` changes on
// every new event and every lost-GPU change, and waiters sleep on it with a futex.
struct SharedEventLog {
  pthread_mutex_t mutex;
  std::uint64_t next_sequence;
  SharedEvent entries[kEventLogSize];
  alignas(64) std::atomic<std::uint32_t> signal;
};

struct SharedMachine {
  std::atomic<std::uint32_t> magic;  // written last by the creator
  std::uint32_t layout_version;
  std::int32_t device_count;
  char config[256];  // canonical SIMGPU_CONFIG the machine was created with
  // Serialises MIG changes (mode, instances) and process binding to MIG devices. Robust and
  // process-shared: a process killed while holding it does not wedge the machine.
  pthread_mutex_t mig_mutex;
  SharedDevice devices[kMaxDevices];
  ProcessSlot slots[kMaxProcessSlots];
  SharedEventLog events;
};

static_assert(std::atomic<std::uint64_t>::is_always_lock_free,
              "shared counters must be address-free atomics");
static_assert(std::atomic<std::uint32_t>::is_always_lock_free &&
                  sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t),
              "the event signal must be usable as a futex word");

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
