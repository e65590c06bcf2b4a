// MIG on the simulated machine: the rules for MIG mode, GPU instances and compute instances,
// applied to the shared machine under its MIG mutex, so every process of a namespace sees one
// MIG layout. The NVML entry points translate handles and call these; the CUDA driver binds a
// process to the MIG device named in CUDA_VISIBLE_DEVICES.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "abi/nvml_abi.h"
#include "gpu/mig_catalogue.h"
#include "simgpu/core/shared_machine.h"
#include "simgpu/core/uuid.h"

namespace gpufrac::simgpu {

// Holds SharedMachine::mig_mutex for a scope. A previous holder that died mid-change leaves
// the mutex consistent again (the fields it wrote are each valid on their own).
class MigLock {
 public:
  explicit MigLock(SharedMachine& machine);
  ~MigLock();
  MigLock(const MigLock&) = delete;
  MigLock& operator=(const MigLock&) = delete;

 private:
  SharedMachine& machine_;
};

// Initialises the machine's MIG mutex (the creator calls this once).
void InitialiseMigMutex(SharedMachine& machine);

// The MIG facts of a device's model; nullptr when it has no MIG.
const gpu::MigModel* DeviceMigModel(const SharedDevice& device);

// Where a process's MIG device is; see ProcessSlot::mig_binding.
struct MigBinding {
  int device = 0;
  int gpu_instance = 0;
  int compute_instance = 0;
  std::uint32_t generation = 0;
};
std::uint64_t PackMigBinding(const MigBinding& binding);
std::optional<MigBinding> UnpackMigBinding(std::uint64_t packed);

// The GPU instance id NVIDIA drivers give a placement: its node in the binary tree of memory
// slices (the whole GPU 0, halves 1-2, quarters 3-6, eighths 7-14). -1 when the size is not a
// power of two dividing the slices; the caller then takes the lowest free id.
int GpuInstanceIdForPlacement(int memory_slices, int start, int size);

// The compute slices of a compute instance profile id; 0 for ids the simulator does not offer.
int ComputeInstanceProfileSlices(unsigned int profile_id);
// Whether a GPU instance of `gi_slices` compute slices offers compute instances of `ci_slices`
// (NVIDIA offers 1, 2, 3, 4 and 7 where they fit, except 3 in a 4-slice instance).
bool ComputeInstanceProfileOffered(int gi_slices, int ci_slices);

// The MIG device's UUID, derived from the GPU's UUID and the instance ids.
Uuid MigDeviceUuid(const SharedDevice& device, int gpu_instance, int compute_instance);

// The MIG device's product name as NVML and CUDA report it: "NVIDIA A100-SXM4-40GB MIG 1g.5gb",
// with "1c." before the profile for a compute instance smaller than its GPU instance.
std::string MigDeviceName(const SharedDevice& device, int gpu_instance, int compute_instance);

// Everything below needs the MigLock held.

// Whether any live process uses the device: has memory or a context on it, or is bound to one
// of its MIG devices. Reclaims dead processes first.
bool DeviceBusyLocked(SharedMachine& machine, int device);
// Whether a live process is bound to the GPU instance (any of its compute instances when
// `compute_instance` < 0). Reclaims dead processes first.
bool InstanceBusyLocked(SharedMachine& machine, int device, int gpu_instance, int compute_instance);

// A live process with a CUDA context on a GPU: one that holds memory there (every active
// context holds its context_bytes). The ids are its MIG device's, -1 when it uses the whole GPU.
struct DeviceProcess {
  int pid = 0;
  std::uint64_t used_bytes = 0;
  int gpu_instance = -1;
  int compute_instance = -1;
};
// The processes on `device`, by slot; with `gpu_instance` >= 0 only those in that MIG device
// (`compute_instance`). Reclaims dead processes first, so the dead are never listed.
std::vector<DeviceProcess> DeviceProcessesLocked(SharedMachine& machine, int device,
                                                 int gpu_instance, int compute_instance);

// nvmlDeviceSetMigMode: the change takes effect at once when the GPU is idle (no process, and
// no GPU instance left when disabling); otherwise it stays pending and `activation` is
// NVML_ERROR_IN_USE.
abi::nvmlReturn_t SetMigModeLocked(SharedMachine& machine, int device, unsigned int mode,
                                   abi::nvmlReturn_t* activation);

// Creates a GPU instance of `profile` at `placement`, or at the lowest free legal start when
// `placement` is null. INVALID_ARGUMENT for a placement the profile does not allow,
// INSUFFICIENT_RESOURCES when it overlaps an instance, the profile's count is used up, or (no
// placement) no legal start is free. MIG mode must be on (NOT_SUPPORTED otherwise).
abi::nvmlReturn_t CreateGpuInstanceLocked(SharedMachine& machine, int device,
                                          const gpu::MigProfile& profile,
                                          const abi::nvmlGpuInstancePlacement_t* placement,
                                          int* id);
// IN_USE while it has compute instances or processes; INVALID_ARGUMENT if it does not exist.
abi::nvmlReturn_t DestroyGpuInstanceLocked(SharedMachine& machine, int device, int id);

// Creates a compute instance of `profile_id` in the GPU instance, at its lowest free compute
// slices. NOT_SUPPORTED for a profile the instance does not offer, INSUFFICIENT_RESOURCES when
// its compute slices are taken.
abi::nvmlReturn_t CreateComputeInstanceLocked(SharedMachine& machine, int device, int gpu_instance,
                                              unsigned int profile_id, int* id);
// IN_USE while a process is bound to it.
abi::nvmlReturn_t DestroyComputeInstanceLocked(SharedMachine& machine, int device, int gpu_instance,
                                               int id);

}  // namespace gpufrac::simgpu
