// The exported NVML event entry points (event sets, registration, waiting) over the shared
// machine's event log, and the simulator's fault-injection controls that feed it.
#include <bit>
#include <chrono>
#include <cstdint>
#include <limits>
#include <mutex>
#include <unordered_set>

#include "simgpu/core/device_events.h"
#include "simgpu/core/kernel_fault.h"
#include "simgpu/nvml/fault_injection.h"
#include "simgpu/nvml/nvml_exports.h"
#include "simgpu/nvml/nvml_state.h"

namespace {

namespace abi = gpufrac::abi;
namespace simgpu = gpufrac::simgpu;
using abi::nvmlReturn_t;

// What every simulated GPU offers. All catalogue models are data-centre GPUs with ECC on, and
// NVML raises XID events on Linux for every GPU since Fermi. Clock events are Kepler-only and
// power-source events are for notebooks; MIG configuration events are not simulated, so they
// are not offered either.
constexpr unsigned long long kSupportedEventTypes =
    abi::nvmlEventTypeSingleBitEccError | abi::nvmlEventTypeDoubleBitEccError |
    abi::nvmlEventTypePState | abi::nvmlEventTypeXidCriticalError;

constexpr std::uint64_t kNotRegistered = std::numeric_limits<std::uint64_t>::max();

// One nvmlEventSet_t: a read position in the machine's event log and, per GPU and event type
// bit, the first event it records ("events that occurred before this call are not recorded").
struct EventSet {
  std::mutex mu;
  std::uint64_t cursor = 0;
  std::uint64_t registered_from[simgpu::kMaxDevices][64];

  EventSet() {
    for (auto& device : registered_from) {
      for (std::uint64_t& from : device) from = kNotRegistered;
    }
  }

  bool Registered(unsigned int device) const {
    for (std::uint64_t from : registered_from[device]) {
      if (from != kNotRegistered) return true;
    }
    return false;
  }
};

// Live sets, so that a stale or foreign handle is refused rather than dereferenced.
std::mutex g_sets_mu;
std::unordered_set<EventSet*> g_sets;

EventSet* FindSet(abi::nvmlEventSet_t handle) {
  auto* set = reinterpret_cast<EventSet*>(handle);
  std::lock_guard lock(g_sets_mu);
  return g_sets.contains(set) ? set : nullptr;
}

// A physical GPU's index behind `handle`. NVML does not report events per MIG device
// ("This API does not currently support per-instance event reporting using MIG device
// handles"), so those answer NOT_SUPPORTED.
nvmlReturn_t GetEventDevice(abi::nvmlDevice_t handle, unsigned int* index) {
  if (nvmlReturn_t result = simgpu::NvmlCheckInit(); result != abi::NVML_SUCCESS) return result;
  if (simgpu::MigIds ids; simgpu::NvmlMigDeviceFromHandle(handle, &ids)) {
    return abi::NVML_ERROR_NOT_SUPPORTED;
  }
  const simgpu::NvmlDevice* device = simgpu::NvmlDeviceFromHandle(handle);
  if (device == nullptr) return abi::NVML_ERROR_INVALID_ARGUMENT;
  *index = device->index;
  return simgpu::NvmlCheckDevice(device->index);
}

// The machine for a control, and whether `index` names one of its GPUs.
nvmlReturn_t ControlMachine(const char* caller, unsigned int index,
                            simgpu::SharedMachine** machine) {
  *machine = simgpu::NvmlAttachMachine(caller);
  if (*machine == nullptr) return abi::NVML_ERROR_UNKNOWN;
  if (index >= static_cast<unsigned int>((*machine)->device_count)) {
    return abi::NVML_ERROR_INVALID_ARGUMENT;
  }
  return abi::NVML_SUCCESS;
}

}  // namespace

extern "C" {

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(abi::nvmlDevice_t handle,
                                              unsigned long long* event_types) {
  unsigned int index = 0;
  if (nvmlReturn_t result = GetEventDevice(handle, &index); result != abi::NVML_SUCCESS) {
    return result;
  }
  if (event_types == nullptr) return abi::NVML_ERROR_INVALID_ARGUMENT;
  *event_types = kSupportedEventTypes;
  return abi::NVML_SUCCESS;
}

// As documented: a mask with any unsupported type registers none of it (NOT_SUPPORTED, the set
// stays usable); registering a type again keeps its first registration.
nvmlReturn_t nvmlDeviceRegisterEvents(abi::nvmlDevice_t handle, unsigned long long event_types,
                                      abi::nvmlEventSet_t set_handle) {
  unsigned int index = 0;
  if (nvmlReturn_t result = GetEventDevice(handle, &index); result != abi::NVML_SUCCESS) {
    return result;
  }
  EventSet* set = FindSet(set_handle);
  if (set == nullptr) return abi::NVML_ERROR_INVALID_ARGUMENT;
  if ((event_types & ~kSupportedEventTypes) != 0) return abi::NVML_ERROR_NOT_SUPPORTED;
  std::lock_guard lock(set->mu);
  const std::uint64_t now = simgpu::EventLogHead(simgpu::NvmlMachine());
  for (int bit = 0; bit < 64; ++bit) {
    if ((event_types >> bit & 1) != 0 && set->registered_from[index][bit] == kNotRegistered) {
      set->registered_from[index][bit] = now;
    }
  }
  return abi::NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetCreate(abi::nvmlEventSet_t* set_handle) {
  if (nvmlReturn_t result = simgpu::NvmlCheckInit(); result != abi::NVML_SUCCESS) return result;
  if (set_handle == nullptr) return abi::NVML_ERROR_INVALID_ARGUMENT;
  auto* set = new EventSet;
  set->cursor = simgpu::EventLogHead(simgpu::NvmlMachine());
  {
    std::lock_guard lock(g_sets_mu);
    g_sets.insert(set);
  }
  *set_handle = reinterpret_cast<abi::nvmlEventSet_t>(set);
  return abi::NVML_SUCCESS;
}

// Events come one per call, oldest first. Once a set has none left to deliver, a lost GPU
// registered in it makes the call answer NVML_ERROR_GPU_IS_LOST instead of waiting.
nvmlReturn_t nvmlEventSetWait_v2(abi::nvmlEventSet_t set_handle, abi::nvmlEventData_t* data,
                                 unsigned int timeout_ms) {
  if (nvmlReturn_t result = simgpu::NvmlCheckInit(); result != abi::NVML_SUCCESS) return result;
  if (data == nullptr) return abi::NVML_ERROR_INVALID_ARGUMENT;
  EventSet* set = FindSet(set_handle);
  if (set == nullptr) return abi::NVML_ERROR_INVALID_ARGUMENT;
  simgpu::SharedMachine& machine = simgpu::NvmlMachine();
  const unsigned int device_count = simgpu::NvmlDeviceCount();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (true) {
    // Read before looking, so an event posted after the look still ends the sleep below.
    const std::uint32_t seen = simgpu::EventSignal(machine);
    {
      std::lock_guard lock(set->mu);
      const auto accept = [&](const simgpu::SharedEvent& event) {
        if (event.device >= device_count || !std::has_single_bit(event.type)) return false;
        const std::uint64_t from = set->registered_from[event.device][std::countr_zero(event.type)];
        return from != kNotRegistered && event.sequence >= from;
      };
      if (simgpu::SharedEvent event;
          simgpu::NextDeviceEvent(machine, &set->cursor, accept, &event)) {
        data->device = simgpu::NvmlHandle(simgpu::NvmlDeviceAt(event.device));
        data->eventType = event.type;
        data->eventData = event.data;
        data->gpuInstanceId = event.gpu_instance_id;
        data->computeInstanceId = event.compute_instance_id;
        return abi::NVML_SUCCESS;
      }
      for (unsigned int device = 0; device < device_count; ++device) {
        if (set->Registered(device) && simgpu::DeviceLost(machine, static_cast<int>(device))) {
          return abi::NVML_ERROR_GPU_IS_LOST;
        }
      }
    }
    if (std::chrono::steady_clock::now() >= deadline) return abi::NVML_ERROR_TIMEOUT;
    simgpu::WaitForEventSignal(machine, seen, deadline);
  }
}

nvmlReturn_t nvmlEventSetFree(abi::nvmlEventSet_t set_handle) {
  if (nvmlReturn_t result = simgpu::NvmlCheckInit(); result != abi::NVML_SUCCESS) return result;
  EventSet* set = nullptr;
  {
    std::lock_guard lock(g_sets_mu);
    auto found = g_sets.find(reinterpret_cast<EventSet*>(set_handle));
    if (found == g_sets.end()) return abi::NVML_ERROR_INVALID_ARGUMENT;
    set = *found;
    g_sets.erase(found);
  }
  delete set;
  return abi::NVML_SUCCESS;
}

nvmlReturn_t simgpuInjectXid(unsigned int index, unsigned long long xid) {
  simgpu::SharedMachine* machine = nullptr;
  if (nvmlReturn_t result = ControlMachine("simgpuInjectXid", index, &machine);
      result != abi::NVML_SUCCESS) {
    return result;
  }
  simgpu::PostDeviceEvent(*machine, static_cast<int>(index), abi::nvmlEventTypeXidCriticalError,
                          xid, abi::kNvmlEventNoInstanceId, abi::kNvmlEventNoInstanceId);
  return abi::NVML_SUCCESS;
}

nvmlReturn_t simgpuInjectEccError(unsigned int index, int double_bit) {
  simgpu::SharedMachine* machine = nullptr;
  if (nvmlReturn_t result = ControlMachine("simgpuInjectEccError", index, &machine);
      result != abi::NVML_SUCCESS) {
    return result;
  }
  simgpu::PostDeviceEvent(
      *machine, static_cast<int>(index),
      double_bit != 0 ? abi::nvmlEventTypeDoubleBitEccError : abi::nvmlEventTypeSingleBitEccError,
      0, abi::kNvmlEventNoInstanceId, abi::kNvmlEventNoInstanceId);
  return abi::NVML_SUCCESS;
}

nvmlReturn_t simgpuSetGpuLost(unsigned int index, int lost) {
  simgpu::SharedMachine* machine = nullptr;
  if (nvmlReturn_t result = ControlMachine("simgpuSetGpuLost", index, &machine);
      result != abi::NVML_SUCCESS) {
    return result;
  }
  simgpu::SetDeviceLost(*machine, static_cast<int>(index), lost != 0);
  return abi::NVML_SUCCESS;
}

nvmlReturn_t simgpuInjectKernelFault(unsigned int index, unsigned int pid) {
  simgpu::SharedMachine* machine = nullptr;
  if (nvmlReturn_t result = ControlMachine("simgpuInjectKernelFault", index, &machine);
      result != abi::NVML_SUCCESS) {
    return result;
  }
  return simgpu::InjectKernelFault(*machine, static_cast<int>(index), static_cast<pid_t>(pid))
             ? abi::NVML_SUCCESS
             : abi::NVML_ERROR_NOT_FOUND;
}

}  // extern "C"
