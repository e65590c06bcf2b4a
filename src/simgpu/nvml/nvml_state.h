// Process-local state of the simulated NVML: the init reference count and the devices of the
// shared machine. NVML sees every device (it ignores CUDA_VISIBLE_DEVICES, like the real one).
#pragma once

#include <string>

#include "abi/nvml_abi.h"
#include "gpu/catalogue.h"
#include "simgpu/core/config.h"
#include "simgpu/core/shared_machine.h"

namespace gpufrac::simgpu {

struct NvmlDevice {
  unsigned int index = 0;
  const gpu::GpuModel* model = nullptr;
  std::string uuid;    // "GPU-..."
  std::string serial;  // the board serial number
};

// nvmlInit: joins the shared machine (first call) and counts the reference.
abi::nvmlReturn_t NvmlInit();
// nvmlShutdown: drops a reference; NVML_ERROR_UNINITIALIZED if there is none.
abi::nvmlReturn_t NvmlShutdown();

// NVML_ERROR_UNINITIALIZED unless at least one nvmlInit is outstanding.
abi::nvmlReturn_t NvmlCheckInit();

// The machine, joined if no nvmlInit has joined it yet, without taking an NVML reference (for
// the simulator's fault-injection controls); nullptr, after a message on stderr naming
// `caller`, when it cannot be joined.
SharedMachine* NvmlAttachMachine(const char* caller);

// NVML_ERROR_GPU_IS_LOST while the physical GPU `index` is lost, else NVML_SUCCESS. Every query
// on a GPU (or one of its MIG devices and instances) asks this after resolving its handle.
abi::nvmlReturn_t NvmlCheckDevice(unsigned int index);

SharedMachine& NvmlMachine();
unsigned int NvmlDeviceCount();
// The device by index; nullptr when out of range.
const NvmlDevice* NvmlDeviceAt(unsigned int index);

// Handles are pointers to the NvmlDevice records; nullptr for anything else.
const NvmlDevice* NvmlDeviceFromHandle(abi::nvmlDevice_t handle);
abi::nvmlDevice_t NvmlHandle(const NvmlDevice* device);

// MIG handles: GPU instances, compute instances and MIG devices (an nvmlDevice_t for a compute
// instance) are addresses in process-local tables, one per (device, GPU instance id, compute
// instance id), so a handle names a place: as NVML documents, a handle outlives its instance
// and may come to name a new one created at the same ids. The FromHandle functions decode any
// handle of their kind, live or not (callers check the shared state), and return false for
// anything else.
struct MigIds {
  int device = 0;
  int gpu_instance = 0;
  int compute_instance = 0;
};
abi::nvmlGpuInstance_t NvmlGpuInstanceHandle(int device, int gpu_instance);
bool NvmlGpuInstanceFromHandle(abi::nvmlGpuInstance_t handle, MigIds* ids);
abi::nvmlComputeInstance_t NvmlComputeInstanceHandle(const MigIds& ids);
bool NvmlComputeInstanceFromHandle(abi::nvmlComputeInstance_t handle, MigIds* ids);
abi::nvmlDevice_t NvmlMigDeviceHandle(const MigIds& ids);
bool NvmlMigDeviceFromHandle(abi::nvmlDevice_t handle, MigIds* ids);

}  // namespace gpufrac::simgpu
