// NVML initialisation and the device records behind nvmlDevice_t handles.
#include "simgpu/nvml/nvml_state.h"

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <mutex>

#include "simgpu/core/device_events.h"
#include "simgpu/core/uuid.h"

namespace gpufrac::simgpu {
namespace {

std::mutex g_mu;
std::atomic<int> g_references{0};
SharedMachine* g_machine = nullptr;  // set once, guarded by g_mu until then
NvmlDevice g_devices[kMaxDevices];
unsigned int g_device_count = 0;

// Address ranges for MIG handles; only their addresses are used.
constexpr int kComputeSlots = kMaxDevices * kMaxGpuInstances * kMaxComputeInstances;
char g_gpu_instance_handles[kMaxDevices * kMaxGpuInstances];
char g_compute_instance_handles[kComputeSlots];
char g_mig_device_handles[kComputeSlots];

int ComputeSlot(const MigIds& ids) {
  return (ids.device * kMaxGpuInstances + ids.gpu_instance) * kMaxComputeInstances +
         ids.compute_instance;
}

// The slot a handle points at within `table`, or -1.
int SlotOf(const void* handle, const char* table, int size) {
  const auto address = reinterpret_cast<std::uintptr_t>(handle);
  const auto base = reinterpret_cast<std::uintptr_t>(table);
  if (address < base || address >= base + static_cast<std::uintptr_t>(size)) return -1;
  return static_cast<int>(address - base);
}

bool DecodeComputeSlot(int slot, MigIds* ids) {
  if (slot < 0) return false;
  ids->compute_instance = slot % kMaxComputeInstances;
  ids->gpu_instance = (slot / kMaxComputeInstances) % kMaxGpuInstances;
  ids->device = slot / (kMaxComputeInstances * kMaxGpuInstances);
  return true;
}

// Joins the machine and builds the device records, once; `caller` names the function for
// messages.
SharedMachine* AttachLocked(const char* caller) {
  if (g_machine != nullptr) return g_machine;
  std::string error;
  SharedMachine* machine = AttachSharedMachineFromEnv(&error);
  if (machine == nullptr) {
    std::fprintf(stderr, "simgpu: %s: %s\n", caller, error.c_str());
    return nullptr;
  }
  for (int i = 0; i < machine->device_count; ++i) {
    NvmlDevice& device = g_devices[i];
    device.index = static_cast<unsigned int>(i);
    device.model = DeviceModel(machine->devices[i]);
    if (device.model == nullptr) {
      std::fprintf(stderr, "simgpu: %s: unknown GPU model %s\n", caller, machine->devices[i].model);
      return nullptr;
    }
    Uuid uuid;
    std::copy(std::begin(machine->devices[i].uuid), std::end(machine->devices[i].uuid),
              uuid.begin());
    device.uuid = FormatGpuUuid(uuid);
    device.serial = BoardSerial(uuid);
  }
  g_device_count = static_cast<unsigned int>(machine->device_count);
  g_machine = machine;
  return g_machine;
}

}  // namespace

abi::nvmlReturn_t NvmlInit() {
  std::lock_guard lock(g_mu);
  if (AttachLocked("nvmlInit") == nullptr) return abi::NVML_ERROR_UNKNOWN;
  g_references.fetch_add(1, std::memory_order_release);
  return abi::NVML_SUCCESS;
}

SharedMachine* NvmlAttachMachine(const char* caller) {
  std::lock_guard lock(g_mu);
  return AttachLocked(caller);
}

abi::nvmlReturn_t NvmlCheckDevice(unsigned int index) {
  return index < g_device_count && DeviceLost(*g_machine, static_cast<int>(index))
             ? abi::NVML_ERROR_GPU_IS_LOST
             : abi::NVML_SUCCESS;
}

abi::nvmlReturn_t NvmlShutdown() {
  std::lock_guard lock(g_mu);
  if (g_references.load(std::memory_order_relaxed) == 0) return abi::NVML_ERROR_UNINITIALIZED;
  g_references.fetch_sub(1, std::memory_order_release);
  return abi::NVML_SUCCESS;
}

abi::nvmlReturn_t NvmlCheckInit() {
  return g_references.load(std::memory_order_acquire) > 0 ? abi::NVML_SUCCESS
                                                          : abi::NVML_ERROR_UNINITIALIZED;
}

SharedMachine& NvmlMachine() { return *g_machine; }

unsigned int NvmlDeviceCount() { return g_device_count; }

const NvmlDevice* NvmlDeviceAt(unsigned int index) {
  return index < g_device_count ? &g_devices[index] : nullptr;
}

const NvmlDevice* NvmlDeviceFromHandle(abi::nvmlDevice_t handle) {
  for (unsigned int i = 0; i < g_device_count; ++i) {
    if (NvmlHandle(&g_devices[i]) == handle) return &g_devices[i];
  }
  return nullptr;
}

abi::nvmlDevice_t NvmlHandle(const NvmlDevice* device) {
  return reinterpret_cast<abi::nvmlDevice_t>(const_cast<NvmlDevice*>(device));
}

}  // namespace gpufrac::simgpu

namespace gpufrac::simgpu {

abi::nvmlGpuInstance_t NvmlGpuInstanceHandle(int device, int gpu_instance) {
  return reinterpret_cast<abi::nvmlGpuInstance_t>(
      &g_gpu_instance_handles[device * kMaxGpuInstances + gpu_instance]);
}

bool NvmlGpuInstanceFromHandle(abi::nvmlGpuInstance_t handle, MigIds* ids) {
  const int slot = SlotOf(handle, g_gpu_instance_handles, sizeof(g_gpu_instance_handles));
  if (slot < 0) return false;
  *ids = MigIds{.device = slot / kMaxGpuInstances, .gpu_instance = slot % kMaxGpuInstances};
  return true;
}

abi::nvmlComputeInstance_t NvmlComputeInstanceHandle(const MigIds& ids) {
  return reinterpret_cast<abi::nvmlComputeInstance_t>(
      &g_compute_instance_handles[ComputeSlot(ids)]);
}

bool NvmlComputeInstanceFromHandle(abi::nvmlComputeInstance_t handle, MigIds* ids) {
  return DecodeComputeSlot(
      SlotOf(handle, g_compute_instance_handles, sizeof(g_compute_instance_handles)), ids);
}

abi::nvmlDevice_t NvmlMigDeviceHandle(const MigIds& ids) {
  return reinterpret_cast<abi::nvmlDevice_t>(&g_mig_device_handles[ComputeSlot(ids)]);
}

bool NvmlMigDeviceFromHandle(abi::nvmlDevice_t handle, MigIds* ids) {
  return DecodeComputeSlot(SlotOf(handle, g_mig_device_handles, sizeof(g_mig_device_handles)), ids);
}

}  // namespace gpufrac::simgpu
