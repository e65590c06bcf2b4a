// The simulated machine as every process of a namespace sees it: a POSIX shared-memory segment
// holding the device table, each device's memory counter, one slot per attached process and each
// device's compute engines. Created by whichever process comes first; memory counters are
// lock-free atomics, engines and MIG state change under robust process-shared mutexes.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "simgpu/core/config.h"

namespace gpufrac::simgpu {

inline constexpr int kMaxProcessSlots = 512;
// GPU instance ids are indices into a device's instance table. Ids follow the placement (see
// mig_state.h), and a GPU of 8 memory slices has 15 possible placements of power-of-two sizes.
inline constexpr int kMaxGpuInstances = 16;
inline constexpr int kMaxComputeInstances = 8;  // per GPU instance (at most 7 compute slices)
// NVML events the machine remembers (see device_events.h); a reader that falls further behind
// loses the oldest, as NVML's own queue would.
inline constexpr int kEventLogSize = 256;
// Compute engines (see engine.h): a GPU has one, or in MIG mode one per compute instance (at most
// 7). Each CUDA context on a device is a client of one of them.
inline constexpr int kEnginesPerDevice = 8;
inline constexpr int kEngineClientsPerDevice = 128;
// Timing events being tracked per device (cuEventCreate without CU_EVENT_DISABLE_TIMING).
inline constexpr int kEventWatchesPerDevice = 1024;

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
  // Compute-engine time this process's contexts have received on each device (ns, weighted by
  // the share of the SMs they used; see SharedEngineClient::engine_ns); written by whichever
  // process advances the engine, under that device's engine mutex.
  std::atomic<std::uint64_t> engine_ns[kMaxDevices];
  // NVML's per-process samples (nvmlDeviceGetProcessUtilization): on each device, the engine time
  // (weighted as engine_ns) this process received in NVML sample period `sample_period` and in
  // the period before it. Changed under that device's engine mutex (and cleared by a process
  // that takes the slot).
  std::atomic<std::uint64_t> sample_period[kMaxDevices];
  std::atomic<std::uint64_t> sample_ns[kMaxDevices];
  std::atomic<std::uint64_t> previous_sample_ns[kMaxDevices];
  // A sticky error of the process's contexts (kernel_fault.h): the devices it holds on (bit per
  // physical device; 0: none) and the CUresult every context-bound call there returns. Set by
  // whoever injects the fault or loses the process's MPS server; cleared when the slot is freed.
  std::atomic<std::uint32_t> fault_devices;
  std::atomic<std::int32_t> fault_error;
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

// A whole engine's SMs, in millionths (SharedEngineClient::share_ppm).
inline constexpr std::uint32_t kWholeEnginePpm = 1000000;

// A CUDA context as a client of a compute engine. Its virtual clock `served_ns` advances only
// while it holds the engine (an MPS client: while its server's group does, at a rate that falls
// when the group's running clients want more SMs than the engine has; see engine.h); its queued
// work is done when `served_ns` reaches `pending_ns`.
struct SharedEngineClient {
  std::int32_t engine = -1;     // index in SharedEngineTable::engines; -1: free entry
  std::int32_t slot = 0;        // the owning process's slot
  std::uint64_t owner = 0;      // that slot's owner word when the client joined (liveness)
  std::uint64_t origin_ns = 0;  // served_ns when it joined
  std::uint64_t served_ns = 0;
  std::uint64_t pending_ns = 0;
  std::uint32_t armed_watches = 0;  // its watches still waiting to be reached
  // MPS: the server whose clients run together as one context of the time-slice scheduler (its
  // identity word; 0 for a context of its own), and the share of the engine's SMs its kernels
  // may use (kWholeEnginePpm without MPS).
  std::uint64_t group = 0;
  std::uint32_t share_ppm = kWholeEnginePpm;
  // Nonzero once a fatal error took the context: its work was dropped and waits on it end.
  std::uint32_t failed = 0;
  // Engine time received, each moment weighted by the share of the engine's SMs the context's
  // kernels used (equal to served_ns - origin_ns for a context of its own).
  std::uint64_t engine_ns = 0;
};

// One compute engine: a whole GPU, or one MIG compute instance (`gpu_instance` >= 0).
struct SharedEngine {
  std::uint32_t clients = 0;  // registered clients; 0: free entry
  std::int32_t gpu_instance = 0;
  std::int32_t compute_instance = 0;
  std::uint64_t generation = 0;   // the GPU instance's generation (a recreated instance is new)
  std::int32_t holder = -1;       // client running now; -1 when idle
  std::int32_t last_holder = -1;  // round-robin position
  std::uint64_t slice_start_ns = 0;
  std::uint64_t advanced_ns = 0;  // the engine is simulated up to here (CLOCK_MONOTONIC)
  // Time some client held it since the machine was created, each moment weighted by the share
  // of the engine's SMs in use (1 for a context of its own, the running MPS clients' shares
  // summed and capped at 1 for an MPS group).
  std::uint64_t busy_ns = 0;
  std::uint32_t busy_clients = 0;  // clients with work (served_ns < pending_ns)
  // Busy time per NVML sample period (kUtilizationPeriodNs), not weighted (NVML counts time in
  // which any kernel ran): the current period's index and its busy time so far, and the busy
  // time of the period before it.
  std::uint64_t sample_period = 0;
  std::uint64_t sample_busy_ns = 0;
  std::uint64_t previous_busy_ns = 0;
};

// A timing event's completion: the real time at which its client's served_ns reached `target`.
struct SharedEventWatch {
  std::int32_t client = -1;  // -1: free entry
  std::uint32_t armed = 0;   // nonzero until the target is reached
  std::uint64_t target_ns = 0;
  std::uint64_t reached_ns = 0;
};

// A device's compute engines and their clients, all guarded by `mutex` (robust,
// process-shared).
struct SharedEngineTable {
  pthread_mutex_t mutex;
  std::uint64_t liveness_checked_ns;  // when dead clients were last looked for
  std::uint64_t retired_busy_ns;      // busy time of engines freed since (no clients left)
  SharedEngine engines[kEnginesPerDevice];
  SharedEngineClient clients[kEngineClientsPerDevice];
  SharedEventWatch watches[kEventWatchesPerDevice];
};

struct SharedMachine {
  std::atomic<std::uint32_t> magic;  // written last by the creator
  std::uint32_t layout_version;
  std::int32_t device_count;
  char config[256];            // canonical SIMGPU_CONFIG the machine was created with
  std::uint64_t timeslice_ns;  // compute engines' time slice (SIMGPU_TIMESLICE_US at creation)
  // Serialises MIG changes (mode, instances) and process binding to MIG devices. Robust and
  // process-shared: a process killed while holding it does not wedge the machine.
  pthread_mutex_t mig_mutex;
  SharedDevice devices[kMaxDevices];
  ProcessSlot slots[kMaxProcessSlots];
  SharedEventLog events;
  SharedEngineTable engines[kMaxDevices];
};

static_assert(std::atomic<std::uint64_t>::is_always_lock_free,
              "shared counters must be address-free atomics");
static_assert(std::atomic<std::uint32_t>::is_always_lock_free &&
                  sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t),
              "the event signal must be usable as a futex word");

// "/simgpu.<namespace>", with characters other than [A-Za-z0-9._-] replaced by '_'. One machine
// per namespace for every user, as a GPU is one for every user of its host.
std::string SharedMemoryName(std::string_view name_space);

// Maps the machine of `name_space`, creating and initialising it from `config` if this process
// is the first (a file lock on the segment makes creation race-free, and a creator that died
// half-way is detected and redone). The segment is mode 0666: every user's processes share its
// GPUs' memory and engine time. (Its integrity rests on them using it through the driver API
// only: any of them can write it, as no process can write a real GPU's driver state.) If the machine exists, its own configuration wins and
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
