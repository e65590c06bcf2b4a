// Who holds how much device memory: charging and releasing bytes on a device's shared counter
// and the owning process's slot, claiming and releasing process slots, and reclaiming the memory
// of processes that died without releasing it (as the real driver does when a process exits).
#pragma once

#include <cstdint>
#include <optional>

#include "proc/process_identity.h"
#include "simgpu/core/shared_machine.h"

namespace gpufrac::simgpu {

// Charges `bytes` of physical device `device` to `slot` if they fit; lock-free, no syscalls.
// When the slot is bound to a MIG device of `device`, the bytes must fit that instance's memory
// and are charged to it as well.
bool TryCharge(SharedMachine& machine, ProcessSlot& slot, int device, std::uint64_t bytes);

// TryCharge, and if the device is full, reclaims dead processes' memory and tries once more.
bool Charge(SharedMachine& machine, ProcessSlot& slot, int device, std::uint64_t bytes);

// Returns bytes charged earlier by TryCharge/Charge.
void Release(SharedMachine& machine, ProcessSlot& slot, int device, std::uint64_t bytes);

// Bytes of `device` held by all processes.
std::uint64_t UsedBytes(const SharedMachine& machine, int device);
// Bytes of GPU instance `gpu_instance` of `device` held by all processes.
std::uint64_t MigUsedBytes(const SharedMachine& machine, int device, int gpu_instance);

// Frees the slots (and their memory) of owners that are no longer alive. With
// `self_is_stale`, slots bearing the caller's own identity are freed too: they belong to an
// earlier program image of this process (exec keeps pid and start time). Returns how many.
int ReclaimDeadProcesses(SharedMachine& machine, bool self_is_stale);

// The process owning `slot`; nullopt for a free slot or one being reclaimed.
std::optional<proc::ProcessId> SlotOwner(const ProcessSlot& slot);

// Takes a free slot for `self`; nullptr if all are taken by live processes.
ProcessSlot* ClaimSlot(SharedMachine& machine, const proc::ProcessId& self);

// Returns everything the slot holds to the devices and frees the slot.
void ReleaseSlot(SharedMachine& machine, ProcessSlot& slot);

}  // namespace gpufrac::simgpu
