// Driver entry points for plain device memory: allocation (linear, pitched, managed, legacy
// 32-bit), free, address ranges and the free/total query.
#include <algorithm>
#include <climits>

#include "simgpu/core/memory_ledger.h"
#include "simgpu/cuda/cuda_exports.h"
#include "simgpu/cuda/driver.h"

namespace {

namespace abi = gpufrac::abi;
namespace simgpu = gpufrac::simgpu;
using abi::CUresult;
using simgpu::AllocationKind;
using simgpu::Context;
using simgpu::Driver;

constexpr std::uint64_t kPitchAlignment = 512;

// Allocates `size` bytes on the current context's device.
CUresult AllocateInCurrentContext(std::uint64_t size, AllocationKind kind, abi::CUdeviceptr* base) {
  Driver* driver;
  Context* context;
  if (CUresult result = simgpu::GetDriverAndContext(&driver, &context);
      result != abi::CUDA_SUCCESS) {
    return result;
  }
  if (base == nullptr || size == 0) return abi::CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(driver->mu);
  return driver->AllocateLocked(simgpu::Allocation{.size = size,
                                                   .charged = size,
                                                   .ordinal = context->ordinal,
                                                   .context = context,
                                                   .kind = kind},
                                base);
}

// cuMemAllocPitch in both forms: rows padded to 512 bytes, the whole padded block charged.
CUresult AllocatePitched(std::uint64_t width_bytes, std::uint64_t height,
                         unsigned int element_bytes, AllocationKind kind, abi::CUdeviceptr* base,
                         std::uint64_t* pitch) {
  Driver* driver;
  Context* context;
  if (CUresult result = simgpu::GetDriverAndContext(&driver, &context);
      result != abi::CUDA_SUCCESS) {
    return result;
  }
  if (base == nullptr || pitch == nullptr || width_bytes == 0 || height == 0 ||
      (element_bytes != 4 && element_bytes != 8 && element_bytes != 16)) {
    return abi::CUDA_ERROR_INVALID_VALUE;
  }
  const std::uint64_t padded =
      (width_bytes + kPitchAlignment - 1) / kPitchAlignment * kPitchAlignment;
  if (padded < width_bytes || height > UINT64_MAX / padded) {
    return abi::CUDA_ERROR_OUT_OF_MEMORY;
  }
  CUresult result = AllocateInCurrentContext(padded * height, kind, base);
  if (result == abi::CUDA_SUCCESS) *pitch = padded;
  return result;
}

CUresult Free(abi::CUdeviceptr base) {
  Driver* driver;
  if (CUresult result = simgpu::GetDriver(&driver); result != abi::CUDA_SUCCESS) return result;
  std::lock_guard lock(driver->mu);
  return driver->FreeLocked(base);
}

// Free and total memory of the current context's device, as every process sees it. An MPS client
// with a pinned memory limit sees the limit as its total and what it has left under the limit
// (at most what the device has free) as free: what its allocations can still get.
CUresult MemoryInfo(std::uint64_t* free, std::uint64_t* total) {
  Driver* driver;
  Context* context;
  if (CUresult result = simgpu::GetDriverAndContext(&driver, &context);
      result != abi::CUDA_SUCCESS) {
    return result;
  }
  const simgpu::VisibleDevice& device = driver->devices[context->ordinal];
  *total = device.total_bytes;
  const std::uint64_t used =
      device.gpu_instance < 0
          ? simgpu::UsedBytes(*driver->machine, context->physical)
          : simgpu::MigUsedBytes(*driver->machine, context->physical, device.gpu_instance);
  *free = *total - std::min(used, *total);
  if (const std::uint64_t limit = device.mps_limit_bytes; limit != 0) {
    const std::uint64_t held =
        driver->own_slot->used_bytes[context->physical].load(std::memory_order_relaxed);
    *total = std::min(limit, *total);
    *free = std::min(*free, limit - std::min(held, limit));
  }
  return abi::CUDA_SUCCESS;
}

}  // namespace

extern "C" {

CUresult cuMemAlloc_v2(abi::CUdeviceptr* base, size_t bytes) {
  return AllocateInCurrentContext(bytes, AllocationKind::kDevice, base);
}

CUresult cuMemFree_v2(abi::CUdeviceptr base) { return Free(base); }

// Rows are padded to 512 bytes; the whole padded block is charged.
CUresult cuMemAllocPitch_v2(abi::CUdeviceptr* base, size_t* pitch, size_t width_bytes,
                            size_t height, unsigned int element_bytes) {
  return AllocatePitched(width_bytes, height, element_bytes, AllocationKind::kDevice, base, pitch);
}

// Host-accessible memory (a real anonymous mapping) charged in full to the current device, as
// if it had migrated there.
CUresult cuMemAllocManaged(abi::CUdeviceptr* base, size_t bytes, unsigned int flags) {
  if (flags != abi::CU_MEM_ATTACH_GLOBAL && flags != abi::CU_MEM_ATTACH_HOST) {
    Driver* driver;
    if (CUresult result = simgpu::GetDriver(&driver); result != abi::CUDA_SUCCESS) return result;
    return abi::CUDA_ERROR_INVALID_VALUE;
  }
  return AllocateInCurrentContext(bytes, AllocationKind::kManaged, base);
}

CUresult cuMemGetInfo_v2(size_t* free, size_t* total) {
  std::uint64_t free_bytes = 0;
  std::uint64_t total_bytes = 0;
  if (CUresult result = MemoryInfo(&free_bytes, &total_bytes); result != abi::CUDA_SUCCESS) {
    return result;
  }
  if (free == nullptr || total == nullptr) return abi::CUDA_ERROR_INVALID_VALUE;
  *free = free_bytes;
  *total = total_bytes;
  return abi::CUDA_SUCCESS;
}

// Works from any context (device pointers are unique across the process). Inside an address
// reservation the range is the cuMemMap mapping containing the address (what NCCL and others
// pass to cuMemUnmap); reserved but unmapped addresses are not allocations.
CUresult cuMemGetAddressRange_v2(abi::CUdeviceptr* base, size_t* size, abi::CUdeviceptr address) {
  Driver* driver;
  if (CUresult result = simgpu::GetDriver(&driver); result != abi::CUDA_SUCCESS) return result;
  abi::CUdeviceptr found_base = 0;
  simgpu::Allocation found;
  {
    std::lock_guard lock(driver->mu);
    if (!driver->allocations.FindContaining(address, &found_base, &found)) {
      return abi::CUDA_ERROR_NOT_FOUND;
    }
    if (found.kind == AllocationKind::kReservation) {
      auto mapping = driver->mappings.upper_bound(address);
      if (mapping == driver->mappings.begin()) return abi::CUDA_ERROR_NOT_FOUND;
      --mapping;
      if (address - mapping->first >= mapping->second.size) return abi::CUDA_ERROR_NOT_FOUND;
      found_base = mapping->first;
      found.size = mapping->second.size;
    }
  }
  if (base != nullptr) *base = found_base;
  if (size != nullptr) *size = found.size;
  return abi::CUDA_SUCCESS;
}

// Legacy (pre-CUDA 3.2) entry points with 32-bit pointers and sizes.

CUresult cuMemAlloc(abi::CUdeviceptr_v1* base, unsigned int bytes) {
  if (base == nullptr) return AllocateInCurrentContext(bytes, AllocationKind::kLegacy32, nullptr);
  abi::CUdeviceptr wide = 0;
  CUresult result = AllocateInCurrentContext(bytes, AllocationKind::kLegacy32, &wide);
  if (result == abi::CUDA_SUCCESS) *base = static_cast<abi::CUdeviceptr_v1>(wide);
  return result;
}

CUresult cuMemFree(abi::CUdeviceptr_v1 base) { return Free(base); }

// The pitch fits 32 bits: a row wider than the legacy address space could not be placed anyway.
CUresult cuMemAllocPitch(abi::CUdeviceptr_v1* base, unsigned int* pitch, unsigned int width_bytes,
                         unsigned int height, unsigned int element_bytes) {
  abi::CUdeviceptr wide = 0;
  std::uint64_t wide_pitch = 0;
  CUresult result =
      AllocatePitched(width_bytes, height, element_bytes, AllocationKind::kLegacy32,
                      base != nullptr ? &wide : nullptr, pitch != nullptr ? &wide_pitch : nullptr);
  if (result == abi::CUDA_SUCCESS) {
    *base = static_cast<abi::CUdeviceptr_v1>(wide);
    *pitch = static_cast<unsigned int>(wide_pitch);
  }
  return result;
}

// Sizes above 4 GiB do not fit the legacy types; they are clamped to UINT_MAX.
CUresult cuMemGetInfo(unsigned int* free, unsigned int* total) {
  std::uint64_t free_bytes = 0;
  std::uint64_t total_bytes = 0;
  if (CUresult result = MemoryInfo(&free_bytes, &total_bytes); result != abi::CUDA_SUCCESS) {
    return result;
  }
  if (free == nullptr || total == nullptr) return abi::CUDA_ERROR_INVALID_VALUE;
  *free = static_cast<unsigned int>(std::min<std::uint64_t>(free_bytes, UINT_MAX));
  *total = static_cast<unsigned int>(std::min<std::uint64_t>(total_bytes, UINT_MAX));
  return abi::CUDA_SUCCESS;
}

}  // extern "C"
