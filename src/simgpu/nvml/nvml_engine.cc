// What NVML and the simulator's ground-truth controls report about the compute engines:
// nvmlDeviceGetUtilizationRates, nvmlDeviceGetProcessUtilization, and each process's engine time
// and each GPU's busy time (engine_truth.h).
#include <time.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "simgpu/core/engine.h"
#include "simgpu/core/engine_truth.h"
#include "simgpu/core/memory_ledger.h"
#include "simgpu/core/sim_time.h"
#include "simgpu/nvml/nvml_exports.h"
#include "simgpu/nvml/nvml_state.h"

namespace {

namespace abi = gpufrac::abi;
namespace simgpu = gpufrac::simgpu;
using abi::nvmlReturn_t;

nvmlReturn_t TruthMachine(const char* caller, unsigned int index, unsigned long long* ns,
                          simgpu::SharedMachine** machine) {
  *machine = simgpu::NvmlAttachMachine(caller);
  if (*machine == nullptr) return abi::NVML_ERROR_UNKNOWN;
  if (index >= static_cast<unsigned int>((*machine)->device_count) || ns == nullptr) {
    return abi::NVML_ERROR_INVALID_ARGUMENT;
  }
  return abi::NVML_SUCCESS;
}

// For a query of a whole GPU's engine: the physical index behind `handle`, or NVML's answer:
// not supported on MIG devices nor on a GPU in MIG mode, an invalid argument for a handle that
// is not a device or a null `out`.
nvmlReturn_t WholeGpuOf(abi::nvmlDevice_t handle, const void* out, int* index) {
  if (nvmlReturn_t result = simgpu::NvmlCheckInit(); result != abi::NVML_SUCCESS) return result;
  simgpu::MigIds ids;
  if (simgpu::NvmlMigDeviceFromHandle(handle, &ids)) return abi::NVML_ERROR_NOT_SUPPORTED;
  const simgpu::NvmlDevice* device = simgpu::NvmlDeviceFromHandle(handle);
  if (device == nullptr || out == nullptr) return abi::NVML_ERROR_INVALID_ARGUMENT;
  if (nvmlReturn_t result = simgpu::NvmlCheckDevice(device->index); result != abi::NVML_SUCCESS) {
    return result;
  }
  *index = static_cast<int>(device->index);
  if (simgpu::NvmlMachine().devices[*index].mig_current == abi::NVML_DEVICE_MIG_ENABLE) {
    return abi::NVML_ERROR_NOT_SUPPORTED;
  }
  return abi::NVML_SUCCESS;
}

// How far the real-time clock is ahead of the monotonic one, in microseconds, read once: a
// period's timestamp must be the same at every query, or a caller would take it for a new sample.
std::uint64_t RealMinusMonotonicUs() {
  static const std::uint64_t offset = [] {
    timespec real{};
    ::clock_gettime(CLOCK_REALTIME, &real);
    const std::uint64_t real_us = static_cast<std::uint64_t>(real.tv_sec) * 1000000 +
                                  static_cast<std::uint64_t>(real.tv_nsec) / 1000;
    return real_us - simgpu::NowNs() / 1000;
  }();
  return offset;
}

}  // namespace

extern "C" {

// The memory figure is 0: the simulator has no memory traffic. NVML does not support the query
// on MIG devices, nor on a GPU in MIG mode.
nvmlReturn_t nvmlDeviceGetUtilizationRates(abi::nvmlDevice_t handle,
                                           abi::nvmlUtilization_t* utilization) {
  int index = 0;
  if (nvmlReturn_t result = WholeGpuOf(handle, utilization, &index); result != abi::NVML_SUCCESS) {
    return result;
  }
  simgpu::SharedMachine& machine = simgpu::NvmlMachine();
  utilization->gpu = simgpu::DeviceUtilizationPercent(machine, index);
  utilization->memory = 0;
  return abi::NVML_SUCCESS;
}

// Each sample is one process's engine time over the last complete sample period, as a percent of
// the period (weighted by the SMs its kernels used, as under MPS), stamped with the period's end
// on the CPU's real-time clock. Not supported on MIG devices nor on a GPU in MIG mode (NVML's own
// answer there).
nvmlReturn_t nvmlDeviceGetProcessUtilization(abi::nvmlDevice_t handle,
                                             abi::nvmlProcessUtilizationSample_t* utilization,
                                             unsigned int* count, unsigned long long last_seen_us) {
  int index = 0;
  if (nvmlReturn_t result = WholeGpuOf(handle, count, &index); result != abi::NVML_SUCCESS) {
    return result;
  }
  simgpu::SharedMachine& machine = simgpu::NvmlMachine();
  std::vector<abi::nvmlProcessUtilizationSample_t> fresh;
  for (const simgpu::ProcessSample& sample : simgpu::ProcessSamples(machine, index)) {
    const std::uint64_t stamp_us = sample.end_ns / 1000 + RealMinusMonotonicUs();
    if (stamp_us <= last_seen_us) continue;
    fresh.push_back({.pid = static_cast<unsigned int>(sample.pid),
                     .timeStamp = stamp_us,
                     .smUtil = sample.sm_percent,
                     .memUtil = 0,
                     .encUtil = 0,
                     .decUtil = 0});
  }
  if (fresh.empty()) return abi::NVML_ERROR_NOT_FOUND;
  if (utilization == nullptr || *count < fresh.size()) {
    *count = static_cast<unsigned int>(fresh.size());
    return abi::NVML_ERROR_INSUFFICIENT_SIZE;
  }
  std::copy(fresh.begin(), fresh.end(), utilization);
  *count = static_cast<unsigned int>(fresh.size());
  return abi::NVML_SUCCESS;
}

nvmlReturn_t simgpuGetProcessEngineTime(unsigned int index, unsigned int pid,
                                        unsigned long long* ns) {
  simgpu::SharedMachine* machine = nullptr;
  if (nvmlReturn_t result = TruthMachine("simgpuGetProcessEngineTime", index, ns, &machine);
      result != abi::NVML_SUCCESS) {
    return result;
  }
  for (const simgpu::ProcessSlot& slot : machine->slots) {
    const std::optional<gpufrac::proc::ProcessId> owner = simgpu::SlotOwner(slot);
    if (!owner.has_value() || static_cast<unsigned int>(owner->pid) != pid) continue;
    *ns = simgpu::ProcessEngineNs(*machine, slot, static_cast<int>(index));
    return abi::NVML_SUCCESS;
  }
  return abi::NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t simgpuGetEngineBusyTime(unsigned int index, unsigned long long* ns) {
  simgpu::SharedMachine* machine = nullptr;
  if (nvmlReturn_t result = TruthMachine("simgpuGetEngineBusyTime", index, ns, &machine);
      result != abi::NVML_SUCCESS) {
    return result;
  }
  *ns = simgpu::DeviceBusyNs(*machine, static_cast<int>(index));
  return abi::NVML_SUCCESS;
}

}  // extern "C"
