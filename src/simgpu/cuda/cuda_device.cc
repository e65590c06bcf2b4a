// Driver entry points that describe devices: count, handles, names, UUIDs, memory, attributes.
#include <algorithm>
#include <climits>
#include <cstring>
#include <string_view>

#include "simgpu/core/uuid.h"
#include "simgpu/cuda/cuda_exports.h"
#include "simgpu/cuda/driver.h"
#include "simgpu/cuda/kernel.h"

namespace {

namespace abi = gpufrac::abi;
namespace simgpu = gpufrac::simgpu;
using abi::CUresult;

// The device behind `ordinal`, or the error the driver reports.
CUresult GetDevice(abi::CUdevice ordinal, const simgpu::VisibleDevice** device) {
  simgpu::Driver* driver;
  if (CUresult result = simgpu::GetDriver(&driver); result != abi::CUDA_SUCCESS) return result;
  if (!driver->ValidOrdinal(ordinal)) return abi::CUDA_ERROR_INVALID_DEVICE;
  *device = &driver->devices[ordinal];
  return abi::CUDA_SUCCESS;
}

CUresult CopyUuid(abi::CUuuid* uuid, abi::CUdevice ordinal, bool own_mig_uuid) {
  const simgpu::VisibleDevice* device;
  if (CUresult result = GetDevice(ordinal, &device); result != abi::CUDA_SUCCESS) return result;
  if (uuid == nullptr) return abi::CUDA_ERROR_INVALID_VALUE;
  const simgpu::Uuid& bytes = own_mig_uuid ? device->uuid : device->parent_uuid;
  std::memcpy(uuid->bytes, bytes.data(), sizeof(uuid->bytes));
  return abi::CUDA_SUCCESS;
}

}  // namespace

extern "C" {

CUresult cuDeviceGetCount(int* count) {
  simgpu::Driver* driver;
  if (CUresult result = simgpu::GetDriver(&driver); result != abi::CUDA_SUCCESS) return result;
  if (count == nullptr) return abi::CUDA_ERROR_INVALID_VALUE;
  *count = driver->device_count();
  return abi::CUDA_SUCCESS;
}

CUresult cuDeviceGet(abi::CUdevice* device, int ordinal) {
  const simgpu::VisibleDevice* visible;
  if (CUresult result = GetDevice(ordinal, &visible); result != abi::CUDA_SUCCESS) return result;
  if (device == nullptr) return abi::CUDA_ERROR_INVALID_VALUE;
  *device = ordinal;
  return abi::CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char* name, int length, abi::CUdevice ordinal) {
  const simgpu::VisibleDevice* device;
  if (CUresult result = GetDevice(ordinal, &device); result != abi::CUDA_SUCCESS) return result;
  if (name == nullptr || length <= 0) return abi::CUDA_ERROR_INVALID_VALUE;
  const std::string_view text = device->name;
  const std::size_t copied = std::min(text.size(), static_cast<std::size_t>(length) - 1);
  std::memcpy(name, text.data(), copied);
  name[copied] = '\0';
  return abi::CUDA_SUCCESS;
}

// Without MIG both report the GPU's UUID; on a MIG device the original form reports the GPU's
// and _v2 the MIG device's own.
CUresult cuDeviceGetUuid(abi::CUuuid* uuid, abi::CUdevice ordinal) {
  return CopyUuid(uuid, ordinal, /*own_mig_uuid=*/false);
}

CUresult cuDeviceGetUuid_v2(abi::CUuuid* uuid, abi::CUdevice ordinal) {
  return CopyUuid(uuid, ordinal, /*own_mig_uuid=*/true);
}

CUresult cuDeviceTotalMem_v2(size_t* bytes, abi::CUdevice ordinal) {
  const simgpu::VisibleDevice* device;
  if (CUresult result = GetDevice(ordinal, &device); result != abi::CUDA_SUCCESS) return result;
  if (bytes == nullptr) return abi::CUDA_ERROR_INVALID_VALUE;
  *bytes = device->total_bytes;
  return abi::CUDA_SUCCESS;
}

// The legacy form: totals above 4 GiB do not fit and are clamped to UINT_MAX, as in cuMemGetInfo.
CUresult cuDeviceTotalMem(unsigned int* bytes, abi::CUdevice ordinal) {
  size_t total = 0;
  if (CUresult result = cuDeviceTotalMem_v2(bytes != nullptr ? &total : nullptr, ordinal);
      result != abi::CUDA_SUCCESS) {
    return result;
  }
  *bytes = static_cast<unsigned int>(std::min<size_t>(total, UINT_MAX));
  return abi::CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int* value, abi::CUdevice_attribute attribute,
                              abi::CUdevice ordinal) {
  const simgpu::VisibleDevice* device;
  if (CUresult result = GetDevice(ordinal, &device); result != abi::CUDA_SUCCESS) return result;
  if (value == nullptr) return abi::CUDA_ERROR_INVALID_VALUE;
  const gpufrac::gpu::GpuModel& model = *device->model;
  switch (attribute) {
    case abi::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      *value = 1024;
      break;
    case abi::CU_DEVICE_ATTRIBUTE_WARP_SIZE:
      *value = 32;
      break;
    case abi::CU_DEVICE_ATTRIBUTE_CLOCK_RATE:
      *value = model.max_clock_khz;
      break;
    case abi::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
      *value = device->sm_count;
      break;
    case abi::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID:
      *value = simgpu::PciBusNumber(device->physical);
      break;
    case abi::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID:
      *value = 0;
      break;
    case abi::CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT:
      *value = 32;
      break;
    case abi::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
      *value = model.compute_major;
      break;
    case abi::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
      *value = model.compute_minor;
      break;
    case abi::CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
    case abi::CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
    case abi::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
    case abi::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
    case abi::CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH:
      *value = 1;
      break;
    case abi::CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR:
      *value = simgpu::MaxBlocksPerSm(model);
      break;
    default:
      return abi::CUDA_ERROR_INVALID_VALUE;
  }
  return abi::CUDA_SUCCESS;
}

}  // extern "C"
