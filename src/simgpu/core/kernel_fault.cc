// Fatal context errors and their reach (see kernel_fault.h).
#include "simgpu/core/kernel_fault.h"

#include <optional>
#include <set>
#include <vector>

#include "proc/process_identity.h"
#include "simgpu/core/engine.h"
#include "simgpu/core/memory_ledger.h"

namespace gpufrac::simgpu {
namespace {

struct Seat {
  int device = 0;
  EngineClientInfo client;
};

std::vector<Seat> AllSeats(SharedMachine& machine) {
  std::vector<Seat> seats;
  for (int d = 0; d < machine.device_count; ++d) {
    for (const EngineClientInfo& client : ListEngineClients(machine, d)) {
      seats.push_back({.device = d, .client = client});
    }
  }
  return seats;
}

int SlotIndex(const SharedMachine& machine, const ProcessSlot& slot) {
  return static_cast<int>(&slot - machine.slots);
}

}  // namespace

void FailProcess(SharedMachine& machine, ProcessSlot& slot, std::uint32_t device_mask,
                 abi::CUresult error) {
  const std::uint64_t owner = slot.owner.load(std::memory_order_acquire);
  std::int32_t none = 0;
  // The error is published before the devices, so a reader that sees a device's bit reads it.
  slot.fault_error.compare_exchange_strong(none, static_cast<std::int32_t>(error),
                                           std::memory_order_relaxed);
  slot.fault_devices.fetch_or(device_mask, std::memory_order_release);
  const int index = SlotIndex(machine, slot);
  for (int d = 0; d < machine.device_count; ++d) {
    if ((device_mask & (1u << d)) == 0) continue;
    for (const EngineClientInfo& client : ListEngineClients(machine, d)) {
      if (client.slot == index && client.owner == owner) {
        FailEngineClient(machine, d, client.client, owner);
      }
    }
  }
}

bool InjectKernelFault(SharedMachine& machine, int device, pid_t pid, std::uint32_t* contained) {
  ProcessSlot* faulting = nullptr;
  for (ProcessSlot& slot : machine.slots) {
    const std::optional<proc::ProcessId> owner = SlotOwner(slot);
    if (owner.has_value() && owner->pid == pid) {
      faulting = &slot;
      break;
    }
  }
  if (faulting == nullptr) return false;
  const int faulting_index = SlotIndex(machine, *faulting);
  const std::uint64_t faulting_owner = faulting->owner.load(std::memory_order_acquire);
  const std::vector<Seat> seats = AllSeats(machine);
  std::set<std::uint64_t> groups;
  bool present = false;
  for (const Seat& seat : seats) {
    if (seat.device != device || seat.client.slot != faulting_index ||
        seat.client.owner != faulting_owner) {
      continue;
    }
    present = true;
    if (seat.client.group != 0) groups.insert(seat.client.group);
  }
  if (!present) return false;
  std::uint32_t reach = 1u << device;
  if (groups.empty()) {
    FailProcess(machine, *faulting, reach, abi::CUDA_ERROR_ILLEGAL_ADDRESS);
    if (contained != nullptr) *contained = reach;
    return true;
  }
  // The devices grow through the clients that run on a device already reached.
  auto in_group = [&](const Seat& seat) { return groups.count(seat.client.group) != 0; };
  for (bool grew = true; grew;) {
    grew = false;
    for (const Seat& seat : seats) {
      if (!in_group(seat) || (reach & (1u << seat.device)) == 0) continue;
      for (const Seat& other : seats) {
        if (!in_group(other) || other.client.slot != seat.client.slot ||
            other.client.owner != seat.client.owner || (reach & (1u << other.device)) != 0) {
          continue;
        }
        reach |= 1u << other.device;
        grew = true;
      }
    }
  }
  std::set<int> affected;
  for (const Seat& seat : seats) {
    if (in_group(seat) && (reach & (1u << seat.device)) != 0) {
      ProcessSlot& slot = machine.slots[seat.client.slot];
      if (slot.owner.load(std::memory_order_acquire) == seat.client.owner) {
        affected.insert(seat.client.slot);
      }
    }
  }
  for (int index : affected) {
    FailProcess(machine, machine.slots[index], reach, abi::CUDA_ERROR_ILLEGAL_ADDRESS);
  }
  if (contained != nullptr) *contained = reach;
  return true;
}

}  // namespace gpufrac::simgpu
