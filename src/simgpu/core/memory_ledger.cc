// Lock-free device memory accounting shared by all processes of a simulated machine.
#include "simgpu/core/memory_ledger.h"

#include "simgpu/core/mig_state.h"

namespace gpufrac::simgpu {
namespace {

// Owner encoding: start time above a 23-bit pid (Linux pids are at most 2^22). A reclaimer
// parks a slot at kReclaiming while it drains the slot's counters.
constexpr int kPidBits = 23;
constexpr std::uint64_t kFreeOwner = 0;
constexpr std::uint64_t kReclaiming = ~std::uint64_t{0};

std::uint64_t PackOwner(const proc::ProcessId& identity) {
  return (identity.start_ticks << kPidBits) | static_cast<std::uint64_t>(identity.pid);
}

proc::ProcessId UnpackOwner(std::uint64_t owner) {
  return proc::ProcessId{.pid = static_cast<pid_t>(owner & ((1u << kPidBits) - 1)),
                         .start_ticks = owner >> kPidBits};
}

// The GPU instance a slot's charges on `device` also count against; nullptr if none.
SharedGpuInstance* BoundInstance(SharedMachine& machine, const ProcessSlot& slot, int device) {
  const std::uint64_t packed = slot.mig_binding.load(std::memory_order_relaxed);
  if (packed == 0) return nullptr;  // the common case: no MIG
  const auto binding = UnpackMigBinding(packed);
  if (binding->device != device) return nullptr;
  return &machine.devices[device].gpu_instances[binding->gpu_instance];
}

// Moves the slot's holdings back to the devices (and its MIG instance), then unbinds it. The
// caller owns the slot exclusively. A bound instance cannot be destroyed before the unbinding.
void DrainSlot(SharedMachine& machine, ProcessSlot& slot) {
  for (int d = 0; d < kMaxDevices; ++d) {
    const std::uint64_t held = slot.used_bytes[d].exchange(0, std::memory_order_relaxed);
    if (held == 0) continue;
    if (SharedGpuInstance* instance = BoundInstance(machine, slot, d)) {
      instance->used_bytes.fetch_sub(held, std::memory_order_relaxed);
    }
    machine.devices[d].used_bytes.fetch_sub(held, std::memory_order_relaxed);
  }
  slot.mig_binding.store(0, std::memory_order_release);
}

}  // namespace

bool TryCharge(SharedMachine& machine, ProcessSlot& slot, int device, std::uint64_t bytes) {
  if (SharedGpuInstance* instance = BoundInstance(machine, slot, device)) {
    std::uint64_t used = instance->used_bytes.load(std::memory_order_relaxed);
    do {
      if (bytes > instance->total_bytes - used) return false;
    } while (
        !instance->used_bytes.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
    // The instances' memory is carved out of the device's, so the device cannot overflow.
    machine.devices[device].used_bytes.fetch_add(bytes, std::memory_order_relaxed);
    slot.used_bytes[device].fetch_add(bytes, std::memory_order_relaxed);
    return true;
  }
  SharedDevice& shared = machine.devices[device];
  std::uint64_t used = shared.used_bytes.load(std::memory_order_relaxed);
  do {
    if (bytes > shared.total_bytes - used) return false;
  } while (!shared.used_bytes.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
  // Device first, slot second: a process killed in between leaks these bytes until the
  // namespace is removed, rather than letting a reclaimer subtract bytes never added.
  slot.used_bytes[device].fetch_add(bytes, std::memory_order_relaxed);
  return true;
}

bool Charge(SharedMachine& machine, ProcessSlot& slot, int device, std::uint64_t bytes) {
  if (TryCharge(machine, slot, device, bytes)) return true;
  if (ReclaimDeadProcesses(machine, /*self_is_stale=*/false) == 0) return false;
  return TryCharge(machine, slot, device, bytes);
}

void Release(SharedMachine& machine, ProcessSlot& slot, int device, std::uint64_t bytes) {
  slot.used_bytes[device].fetch_sub(bytes, std::memory_order_relaxed);
  if (SharedGpuInstance* instance = BoundInstance(machine, slot, device)) {
    instance->used_bytes.fetch_sub(bytes, std::memory_order_relaxed);
  }
  machine.devices[device].used_bytes.fetch_sub(bytes, std::memory_order_relaxed);
}

std::uint64_t UsedBytes(const SharedMachine& machine, int device) {
  return machine.devices[device].used_bytes.load(std::memory_order_relaxed);
}

std::uint64_t MigUsedBytes(const SharedMachine& machine, int device, int gpu_instance) {
  return machine.devices[device].gpu_instances[gpu_instance].used_bytes.load(
      std::memory_order_relaxed);
}

int ReclaimDeadProcesses(SharedMachine& machine, bool self_is_stale) {
  const proc::ProcessId self = proc::CurrentProcess();
  int reclaimed = 0;
  for (ProcessSlot& slot : machine.slots) {
    std::uint64_t owner = slot.owner.load(std::memory_order_acquire);
    if (owner == kFreeOwner || owner == kReclaiming) continue;
    const proc::ProcessId identity = UnpackOwner(owner);
    const bool stale = identity == self ? self_is_stale : !proc::MayBeAlive(identity);
    if (!stale) continue;
    if (!slot.owner.compare_exchange_strong(owner, kReclaiming, std::memory_order_acq_rel)) {
      continue;  // another process is reclaiming it
    }
    DrainSlot(machine, slot);
    slot.owner.store(kFreeOwner, std::memory_order_release);
    ++reclaimed;
  }
  return reclaimed;
}

std::optional<proc::ProcessId> SlotOwner(const ProcessSlot& slot) {
  const std::uint64_t owner = slot.owner.load(std::memory_order_acquire);
  if (owner == kFreeOwner || owner == kReclaiming) return std::nullopt;
  return UnpackOwner(owner);
}

ProcessSlot* ClaimSlot(SharedMachine& machine, const proc::ProcessId& self) {
  const std::uint64_t packed = PackOwner(self);
  for (ProcessSlot& slot : machine.slots) {
    std::uint64_t expected = kFreeOwner;
    if (slot.owner.compare_exchange_strong(expected, packed, std::memory_order_acq_rel)) {
      for (auto& engine_ns : slot.engine_ns) engine_ns.store(0, std::memory_order_relaxed);
      for (int d = 0; d < kMaxDevices; ++d) {
        slot.sample_period[d].store(0, std::memory_order_relaxed);
        slot.sample_ns[d].store(0, std::memory_order_relaxed);
        slot.previous_sample_ns[d].store(0, std::memory_order_relaxed);
      }
      slot.fault_devices.store(0, std::memory_order_relaxed);
      slot.fault_error.store(0, std::memory_order_relaxed);
      return &slot;
    }
  }
  return nullptr;
}

void ReleaseSlot(SharedMachine& machine, ProcessSlot& slot) {
  DrainSlot(machine, slot);
  slot.owner.store(kFreeOwner, std::memory_order_release);
}

}  // namespace gpufrac::simgpu
