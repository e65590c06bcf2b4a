// The virtualised view: inside a workload the GPU's total memory is the workload's limit and its
// used/free memory is the workload's own, through the driver (cuMemGetInfo, cuDeviceTotalMem) and
// NVML (so nvidia-smi shows the limit). Free never exceeds what the device really has free.
#include "limiter/hooks.h"

using namespace gpufrac::abi;
using namespace gpufrac::limiter;

extern "C" CUresult cuMemGetInfo_v2(size_t* free, size_t* total) {
  auto real = Real_cuMemGetInfo_v2();
  if (!Active()) return Bypass(real, free, total);
  CUresult r = real(free, total);
  if (r != CUDA_SUCCESS || !free || !total) return r;
  int gpu = CurrentTarget().gpu;
  if (gpu < 0) return r;
  uint64_t t, f, used;
  VirtualMemory(gpu, *free, &t, &f, &used);
  *total = t;
  *free = f;
  return r;
}

extern "C" CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  auto real = Real_cuDeviceTotalMem_v2();
  if (!Active()) return Bypass(real, bytes, dev);
  CUresult r = real(bytes, dev);
  int gpu = r == CUDA_SUCCESS && bytes ? GpuForOrdinal(dev) : -1;
  if (gpu >= 0) *bytes = g_rt.gpus[gpu].budget.limit();
  return r;
}

namespace {

// Both NVML memory structs: total becomes the limit, used the workload's own, free what is left
// of the limit (at most what the device has free).
template <typename Memory>
nvmlReturn_t VirtualiseNvml(nvmlReturn_t r, nvmlDevice_t device, Memory* memory) {
  int gpu = r == NVML_SUCCESS && memory && Active() ? GpuForNvmlDevice(device) : -1;
  if (gpu < 0) return r;
  uint64_t total, free, used;
  VirtualMemory(gpu, memory->free, &total, &free, &used);
  memory->total = total;
  memory->free = free;
  memory->used = used;
  if constexpr (requires { memory->reserved; }) {
    memory->reserved = 0;  // the driver's reservation is outside the workload's limit
  }
  return r;
}

}  // namespace

extern "C" nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  return VirtualiseNvml(Real_nvmlDeviceGetMemoryInfo()(device, memory), device, memory);
}

extern "C" nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t* memory) {
  return VirtualiseNvml(Real_nvmlDeviceGetMemoryInfo_v2()(device, memory), device, memory);
}
