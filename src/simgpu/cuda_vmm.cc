// Driver entry points for physical allocations of the virtual memory management API. Memory
// created on a device is charged to it; memory on a host location is not device memory.
// Mapping (cuMemMap and friends) is not simulated.
#include "simgpu/cuda_exports.h"
#include "simgpu/driver.h"

namespace {

namespace abi = gpufrac::abi;
namespace simgpu = gpufrac::simgpu;
using abi::CUresult;

// The minimum device allocation granularity of every NVIDIA GPU so far
// (cuMemGetAllocationGranularity); sizes must be multiples of it.
constexpr std::uint64_t kDeviceGranularity = 2ull << 20;

}  // namespace

extern "C" {

CUresult cuMemCreate(abi::CUmemGenericAllocationHandle* handle, size_t bytes,
                     const abi::CUmemAllocationProp* prop, unsigned long long flags) {
  simgpu::Driver* driver;
  if (CUresult result = simgpu::GetDriver(&driver); result != abi::CUDA_SUCCESS) return result;
  if (handle == nullptr || prop == nullptr || bytes == 0 || flags != 0 ||
      prop->type != abi::CU_MEM_ALLOCATION_TYPE_PINNED) {
    return abi::CUDA_ERROR_INVALID_VALUE;
  }
  simgpu::PhysicalAllocation allocation{.bytes = bytes};
  switch (prop->location.type) {
    case abi::CU_MEM_LOCATION_TYPE_DEVICE:
      if (!driver->ValidOrdinal(prop->location.id)) return abi::CUDA_ERROR_INVALID_DEVICE;
      if (bytes % kDeviceGranularity != 0) return abi::CUDA_ERROR_INVALID_VALUE;
      allocation.ordinal = prop->location.id;
      break;
    case abi::CU_MEM_LOCATION_TYPE_HOST:
    case abi::CU_MEM_LOCATION_TYPE_HOST_NUMA:
    case abi::CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
      break;
    default:
      return abi::CUDA_ERROR_INVALID_VALUE;
  }
  std::lock_guard lock(driver->mu);
  if (allocation.ordinal >= 0) {
    if (CUresult result = driver->ChargeLocked(allocation.ordinal, bytes);
        result != abi::CUDA_SUCCESS) {
      return result;
    }
  }
  const abi::CUmemGenericAllocationHandle id = driver->next_physical_handle++;
  driver->physical.emplace(id, allocation);
  *handle = id;
  return abi::CUDA_SUCCESS;
}

CUresult cuMemRelease(abi::CUmemGenericAllocationHandle handle) {
  simgpu::Driver* driver;
  if (CUresult result = simgpu::GetDriver(&driver); result != abi::CUDA_SUCCESS) return result;
  std::lock_guard lock(driver->mu);
  auto it = driver->physical.find(handle);
  if (it == driver->physical.end()) return abi::CUDA_ERROR_INVALID_VALUE;
  if (it->second.ordinal >= 0) driver->ReleaseLocked(it->second.ordinal, it->second.bytes);
  driver->physical.erase(it);
  return abi::CUDA_SUCCESS;
}

}  // extern "C"
