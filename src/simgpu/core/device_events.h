// NVML events and lost GPUs on the shared machine: the machine-wide event log that every
// process's event sets read, the lost flags, and the futex that wakes waiting processes. Faults
// are put here by the simulator's controls (fault_injection.h), never by NVIDIA's API.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>

#include "simgpu/core/shared_machine.h"

namespace gpufrac::simgpu {

// Initialises the event log's mutex (the machine's creator calls this once).
void InitialiseEventLog(SharedMachine& machine);

// Appends an event for `device` and wakes every waiter.
void PostDeviceEvent(SharedMachine& machine, int device, std::uint64_t type, std::uint64_t data,
                     std::uint32_t gpu_instance_id, std::uint32_t compute_instance_id);

// Marks the GPU lost (or recovered) and wakes every waiter.
void SetDeviceLost(SharedMachine& machine, int device, bool lost);
bool DeviceLost(const SharedMachine& machine, int device);

// The sequence number the next event will get: events from here on are "after now".
std::uint64_t EventLogHead(SharedMachine& machine);

// The first event at or after `*cursor` that `accept` takes, with `*cursor` moved past it and
// past every event skipped on the way; false (cursor at the head) when there is none. Events
// that fell out of the log are skipped.
bool NextDeviceEvent(SharedMachine& machine, std::uint64_t* cursor,
                     const std::function<bool(const SharedEvent&)>& accept, SharedEvent* event);

// The value of the wake-up word; read it before looking for events, then sleep on it.
std::uint32_t EventSignal(const SharedMachine& machine);
// Sleeps until the wake-up word differs from `seen` or `deadline` passes (spurious returns are
// possible; callers look again).
void WaitForEventSignal(SharedMachine& machine, std::uint32_t seen,
                        std::chrono::steady_clock::time_point deadline);

}  // namespace gpufrac::simgpu
