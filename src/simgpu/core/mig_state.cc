// MIG rules of the simulated GPU (see mig_state.h). Each change is made under the machine's MIG
// mutex and publishes an instance by setting `live` last, so readers that skip the mutex (the
// NVML queries) never see a half-made entry as live.
#include "simgpu/core/mig_state.h"

#include <cerrno>
#include <cstring>

#include "simgpu/core/memory_ledger.h"

namespace gpufrac::simgpu {
namespace {

using abi::nvmlReturn_t;

bool Overlaps(std::uint32_t start_a, std::uint32_t size_a, std::uint32_t start_b,
              std::uint32_t size_b) {
  return start_a < start_b + size_b && start_b < start_a + size_a;
}

bool IsPowerOfTwo(int value) { return value > 0 && (value & (value - 1)) == 0; }

int LiveInstancesOfProfile(const SharedDevice& device, unsigned int profile_id) {
  int count = 0;
  for (const SharedGpuInstance& instance : device.gpu_instances) {
    if (instance.live != 0 && instance.profile_id == profile_id) ++count;
  }
  return count;
}

bool PlacementFree(const SharedDevice& device, int start, int size) {
  for (const SharedGpuInstance& instance : device.gpu_instances) {
    if (instance.live != 0 && Overlaps(instance.start, instance.size, start, size)) return false;
  }
  return true;
}

bool HasGpuInstances(const SharedDevice& device) {
  for (const SharedGpuInstance& instance : device.gpu_instances) {
    if (instance.live != 0) return true;
  }
  return false;
}

}  // namespace

MigLock::MigLock(SharedMachine& machine) : machine_(machine) {
  if (::pthread_mutex_lock(&machine_.mig_mutex) == EOWNERDEAD) {
    ::pthread_mutex_consistent(&machine_.mig_mutex);
  }
}

MigLock::~MigLock() { ::pthread_mutex_unlock(&machine_.mig_mutex); }

void InitialiseMigMutex(SharedMachine& machine) {
  pthread_mutexattr_t attributes;
  ::pthread_mutexattr_init(&attributes);
  ::pthread_mutexattr_setpshared(&attributes, PTHREAD_PROCESS_SHARED);
  ::pthread_mutexattr_setrobust(&attributes, PTHREAD_MUTEX_ROBUST);
  ::pthread_mutex_init(&machine.mig_mutex, &attributes);
  ::pthread_mutexattr_destroy(&attributes);
}

const gpu::MigModel* DeviceMigModel(const SharedDevice& device) {
  const gpu::GpuModel* model = DeviceModel(device);
  return model != nullptr ? gpu::FindMigModel(*model) : nullptr;
}

std::uint64_t PackMigBinding(const MigBinding& binding) {
  return static_cast<std::uint64_t>(binding.device + 1) |
         (static_cast<std::uint64_t>(binding.gpu_instance) << 8) |
         (static_cast<std::uint64_t>(binding.compute_instance) << 16) |
         (static_cast<std::uint64_t>(binding.generation) << 32);
}

std::optional<MigBinding> UnpackMigBinding(std::uint64_t packed) {
  if (packed == 0) return std::nullopt;
  return MigBinding{.device = static_cast<int>(packed & 0xff) - 1,
                    .gpu_instance = static_cast<int>((packed >> 8) & 0xff),
                    .compute_instance = static_cast<int>((packed >> 16) & 0xff),
                    .generation = static_cast<std::uint32_t>(packed >> 32)};
}

int GpuInstanceIdForPlacement(int memory_slices, int start, int size) {
  if (!IsPowerOfTwo(size) || !IsPowerOfTwo(memory_slices) || size > memory_slices ||
      start % size != 0) {
    return -1;
  }
  const int id = memory_slices / size - 1 + start / size;
  return id < kMaxGpuInstances ? id : -1;
}

int ComputeInstanceProfileSlices(unsigned int profile_id) {
  switch (profile_id) {
    case abi::NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE:
      return 1;
    case abi::NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE:
      return 2;
    case abi::NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE:
      return 3;
    case abi::NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE:
      return 4;
    case abi::NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE:
      return 7;
    default:
      return 0;  // 8 and 6 slices and 1_SLICE_REV1 exist on no catalogue model
  }
}

bool ComputeInstanceProfileOffered(int gi_slices, int ci_slices) {
  if (ci_slices <= 0 || ci_slices > gi_slices) return false;
  if (ci_slices == gi_slices) return true;
  if (ci_slices == 3 && gi_slices == 4) return false;
  return ci_slices == 1 || ci_slices == 2 || ci_slices == 3 || ci_slices == 4;
}

Uuid MigDeviceUuid(const SharedDevice& device, int gpu_instance, int compute_instance) {
  Uuid gpu;
  std::memcpy(gpu.data(), device.uuid, gpu.size());
  return MigUuid(gpu, gpu_instance, compute_instance);
}

std::string MigDeviceName(const SharedDevice& device, int gpu_instance, int compute_instance) {
  const gpu::MigModel* mig = DeviceMigModel(device);
  const SharedGpuInstance& instance = device.gpu_instances[gpu_instance];
  std::string name(mig->model->nvml_name);
  name += " MIG ";
  const std::uint32_t slices = instance.compute[compute_instance].slice_count;
  if (slices != instance.compute_slices) name += std::to_string(slices) + "c.";
  for (int i = 0; i < mig->profile_count; ++i) {
    if (mig->profiles[i].profile_id == instance.profile_id) {
      name += gpu::MigProfileName(*mig, mig->profiles[i]);
    }
  }
  return name;
}

bool DeviceBusyLocked(SharedMachine& machine, int device) {
  ReclaimDeadProcesses(machine, /*self_is_stale=*/false);
  for (const ProcessSlot& slot : machine.slots) {
    if (slot.owner.load(std::memory_order_acquire) == 0) continue;
    if (slot.used_bytes[device].load(std::memory_order_relaxed) != 0) return true;
    const auto binding = UnpackMigBinding(slot.mig_binding.load(std::memory_order_acquire));
    if (binding.has_value() && binding->device == device) return true;
  }
  return false;
}

bool InstanceBusyLocked(SharedMachine& machine, int device, int gpu_instance,
                        int compute_instance) {
  ReclaimDeadProcesses(machine, /*self_is_stale=*/false);
  const SharedGpuInstance& instance = machine.devices[device].gpu_instances[gpu_instance];
  for (const ProcessSlot& slot : machine.slots) {
    if (slot.owner.load(std::memory_order_acquire) == 0) continue;
    const auto binding = UnpackMigBinding(slot.mig_binding.load(std::memory_order_acquire));
    if (!binding.has_value() || binding->device != device ||
        binding->gpu_instance != gpu_instance ||
        binding->generation != static_cast<std::uint32_t>(instance.generation)) {
      continue;
    }
    if (compute_instance < 0 || binding->compute_instance == compute_instance) return true;
  }
  return false;
}

std::vector<DeviceProcess> DeviceProcessesLocked(SharedMachine& machine, int device,
                                                 int gpu_instance, int compute_instance) {
  ReclaimDeadProcesses(machine, /*self_is_stale=*/false);
  const SharedDevice& shared = machine.devices[device];
  std::vector<DeviceProcess> found;
  for (const ProcessSlot& slot : machine.slots) {
    const std::optional<proc::ProcessId> owner = SlotOwner(slot);
    const std::uint64_t used = slot.used_bytes[device].load(std::memory_order_relaxed);
    if (!owner.has_value() || used == 0) continue;
    DeviceProcess process{.pid = owner->pid, .used_bytes = used};
    const auto binding = UnpackMigBinding(slot.mig_binding.load(std::memory_order_acquire));
    if (binding.has_value() && binding->device == device) {
      const SharedGpuInstance& instance = shared.gpu_instances[binding->gpu_instance];
      // A binding to an instance destroyed since (only possible for a process the driver let
      // go) names no MIG device any more.
      if (instance.live != 0 &&
          binding->generation == static_cast<std::uint32_t>(instance.generation)) {
        process.gpu_instance = binding->gpu_instance;
        process.compute_instance = binding->compute_instance;
      }
    }
    if (gpu_instance >= 0 &&
        (process.gpu_instance != gpu_instance || process.compute_instance != compute_instance)) {
      continue;
    }
    found.push_back(process);
  }
  return found;
}

nvmlReturn_t SetMigModeLocked(SharedMachine& machine, int device, unsigned int mode,
                              nvmlReturn_t* activation) {
  SharedDevice& shared = machine.devices[device];
  if (DeviceMigModel(shared) == nullptr) return abi::NVML_ERROR_NOT_SUPPORTED;
  if (activation == nullptr ||
      (mode != abi::NVML_DEVICE_MIG_DISABLE && mode != abi::NVML_DEVICE_MIG_ENABLE)) {
    return abi::NVML_ERROR_INVALID_ARGUMENT;
  }
  shared.mig_pending = mode;
  if (mode == shared.mig_current) {
    *activation = abi::NVML_SUCCESS;  // nothing to activate; a pending change is cancelled
    return abi::NVML_SUCCESS;
  }
  // The driver activates a new mode by resetting the GPU, which fails while anything uses it.
  const bool leftover_instances = mode == abi::NVML_DEVICE_MIG_DISABLE && HasGpuInstances(shared);
  if (leftover_instances || DeviceBusyLocked(machine, device)) {
    *activation = abi::NVML_ERROR_IN_USE;
    return abi::NVML_SUCCESS;
  }
  shared.mig_current = mode;
  *activation = abi::NVML_SUCCESS;
  return abi::NVML_SUCCESS;
}

nvmlReturn_t CreateGpuInstanceLocked(SharedMachine& machine, int device,
                                     const gpu::MigProfile& profile,
                                     const abi::nvmlGpuInstancePlacement_t* placement, int* id) {
  SharedDevice& shared = machine.devices[device];
  const gpu::MigModel* mig = DeviceMigModel(shared);
  if (mig == nullptr || shared.mig_current != abi::NVML_DEVICE_MIG_ENABLE) {
    return abi::NVML_ERROR_NOT_SUPPORTED;
  }
  int start = -1;
  if (placement != nullptr) {
    for (int i = 0; i < profile.start_count; ++i) {
      if (profile.starts[i].start == static_cast<int>(placement->start) &&
          profile.starts[i].size == static_cast<int>(placement->size)) {
        start = profile.starts[i].start;
      }
    }
    if (start < 0) return abi::NVML_ERROR_INVALID_ARGUMENT;
  }
  if (LiveInstancesOfProfile(shared, profile.profile_id) >= profile.max_count) {
    return abi::NVML_ERROR_INSUFFICIENT_RESOURCES;
  }
  if (placement != nullptr) {
    if (!PlacementFree(shared, start, profile.memory_slices)) {
      return abi::NVML_ERROR_INSUFFICIENT_RESOURCES;
    }
  } else {
    for (int i = 0; i < profile.start_count && start < 0; ++i) {
      if (PlacementFree(shared, profile.starts[i].start, profile.starts[i].size)) {
        start = profile.starts[i].start;
      }
    }
    if (start < 0) return abi::NVML_ERROR_INSUFFICIENT_RESOURCES;
  }
  int chosen = GpuInstanceIdForPlacement(mig->memory_slices, start, profile.memory_slices);
  if (chosen < 0 || shared.gpu_instances[chosen].live != 0) {
    chosen = -1;
    for (int i = 1; i < kMaxGpuInstances && chosen < 0; ++i) {
      if (shared.gpu_instances[i].live == 0) chosen = i;
    }
    if (chosen < 0) return abi::NVML_ERROR_INSUFFICIENT_RESOURCES;
  }
  SharedGpuInstance& instance = shared.gpu_instances[chosen];
  const gpu::GpuModel* model = DeviceModel(shared);
  instance.profile_id = profile.profile_id;
  instance.start = static_cast<std::uint32_t>(start);
  instance.size = static_cast<std::uint32_t>(profile.memory_slices);
  instance.compute_slices = static_cast<std::uint32_t>(profile.compute_slices);
  instance.sm_count =
      static_cast<std::uint32_t>(model->sm_count * profile.compute_slices / mig->compute_slices);
  instance.total_bytes = profile.memory_bytes;
  instance.generation += 1;
  std::memset(instance.compute, 0, sizeof(instance.compute));
  instance.used_bytes.store(0, std::memory_order_relaxed);
  __atomic_store_n(&instance.live, 1u, __ATOMIC_RELEASE);
  *id = chosen;
  return abi::NVML_SUCCESS;
}

nvmlReturn_t DestroyGpuInstanceLocked(SharedMachine& machine, int device, int id) {
  SharedDevice& shared = machine.devices[device];
  if (id < 0 || id >= kMaxGpuInstances || shared.gpu_instances[id].live == 0) {
    return abi::NVML_ERROR_INVALID_ARGUMENT;
  }
  SharedGpuInstance& instance = shared.gpu_instances[id];
  for (const SharedComputeInstance& compute : instance.compute) {
    if (compute.live != 0) return abi::NVML_ERROR_IN_USE;
  }
  if (InstanceBusyLocked(machine, device, id, -1)) return abi::NVML_ERROR_IN_USE;
  __atomic_store_n(&instance.live, 0u, __ATOMIC_RELEASE);
  return abi::NVML_SUCCESS;
}

nvmlReturn_t CreateComputeInstanceLocked(SharedMachine& machine, int device, int gpu_instance,
                                         unsigned int profile_id, int* id) {
  SharedDevice& shared = machine.devices[device];
  if (gpu_instance < 0 || gpu_instance >= kMaxGpuInstances ||
      shared.gpu_instances[gpu_instance].live == 0 ||
      profile_id >= abi::NVML_COMPUTE_INSTANCE_PROFILE_COUNT) {
    return abi::NVML_ERROR_INVALID_ARGUMENT;
  }
  SharedGpuInstance& instance = shared.gpu_instances[gpu_instance];
  const int slices = ComputeInstanceProfileSlices(profile_id);
  if (!ComputeInstanceProfileOffered(static_cast<int>(instance.compute_slices), slices)) {
    return abi::NVML_ERROR_NOT_SUPPORTED;
  }
  // The lowest run of free compute slices, and the lowest free id.
  std::uint32_t taken = 0;
  int free_id = -1;
  for (int i = 0; i < kMaxComputeInstances; ++i) {
    const SharedComputeInstance& compute = instance.compute[i];
    if (compute.live == 0) {
      if (free_id < 0) free_id = i;
      continue;
    }
    for (std::uint32_t s = 0; s < compute.slice_count; ++s)
      taken |= 1u << (compute.slice_start + s);
  }
  const std::uint32_t run = (1u << slices) - 1;
  int start = -1;
  for (int s = 0; s + slices <= static_cast<int>(instance.compute_slices) && start < 0; ++s) {
    if ((taken & (run << s)) == 0) start = s;
  }
  if (start < 0 || free_id < 0) return abi::NVML_ERROR_INSUFFICIENT_RESOURCES;
  SharedComputeInstance& compute = instance.compute[free_id];
  compute.profile_id = profile_id;
  compute.slice_start = static_cast<std::uint32_t>(start);
  compute.slice_count = static_cast<std::uint32_t>(slices);
  __atomic_store_n(&compute.live, 1u, __ATOMIC_RELEASE);
  *id = free_id;
  return abi::NVML_SUCCESS;
}

nvmlReturn_t DestroyComputeInstanceLocked(SharedMachine& machine, int device, int gpu_instance,
                                          int id) {
  SharedDevice& shared = machine.devices[device];
  if (gpu_instance < 0 || gpu_instance >= kMaxGpuInstances || id < 0 ||
      id >= kMaxComputeInstances || shared.gpu_instances[gpu_instance].live == 0 ||
      shared.gpu_instances[gpu_instance].compute[id].live == 0) {
    return abi::NVML_ERROR_INVALID_ARGUMENT;
  }
  if (InstanceBusyLocked(machine, device, gpu_instance, id)) return abi::NVML_ERROR_IN_USE;
  __atomic_store_n(&shared.gpu_instances[gpu_instance].compute[id].live, 0u, __ATOMIC_RELEASE);
  return abi::NVML_SUCCESS;
}

}  // namespace gpufrac::simgpu
