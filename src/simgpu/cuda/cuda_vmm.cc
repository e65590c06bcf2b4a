// Driver entry points of the virtual memory management API: physical allocations (cuMemCreate),
// address reservations, mappings between them, access rights and handle retention. Memory
// created on a device is charged to it from cuMemCreate until the allocation has no handle
// reference and no mapping left; memory on a host location is not device memory.
#include <unistd.h>

#include <iterator>
#include <vector>

#include "simgpu/cuda/cuda_exports.h"
#include "simgpu/cuda/driver.h"

namespace {

namespace abi = gpufrac::abi;
namespace simgpu = gpufrac::simgpu;
using abi::CUresult;
using simgpu::Driver;

// The allocation granularity of every NVIDIA GPU so far, minimum and recommended alike
// (cuMemGetAllocationGranularity); cuMemCreate sizes, cuMemMap addresses and sizes, and the
// alignment of reservations are multiples of it.
constexpr std::uint64_t kGranularity = 2ull << 20;

bool IsHostLocation(abi::CUmemLocationType type) {
  return type == abi::CU_MEM_LOCATION_TYPE_HOST || type == abi::CU_MEM_LOCATION_TYPE_HOST_NUMA ||
         type == abi::CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT;
}

bool IsPowerOfTwo(std::uint64_t value) { return value != 0 && (value & (value - 1)) == 0; }

// [ptr, ptr + size) as an end address; false if it wraps past 2^64.
bool RangeEnd(std::uint64_t ptr, std::uint64_t size, std::uint64_t* end) {
  *end = ptr + size;
  return *end >= ptr;
}

// Returns the allocation's device memory and forgets it once nothing refers to it any more:
// no handle reference and no mapping. Caller holds driver->mu.
void DropIfUnusedLocked(Driver* driver, decltype(Driver::physical)::iterator allocation) {
  const simgpu::PhysicalAllocation& physical = allocation->second;
  if (physical.handle_references != 0 || physical.mappings != 0) return;
  if (physical.ordinal >= 0) driver->ReleaseLocked(physical.ordinal, physical.bytes);
  driver->physical.erase(allocation);
}

// The mappings that exactly tile [ptr, ptr + size): each starts where the previous one ends,
// the first at `ptr`, the last ending at `ptr + size`. False (and `tiles` unspecified) if any
// byte of the range is unmapped or a mapping sticks out of it. Caller holds driver->mu.
bool MappingsTiling(Driver* driver, std::uint64_t ptr, std::uint64_t size,
                    std::vector<decltype(Driver::mappings)::iterator>* tiles) {
  std::uint64_t end;
  if (size == 0 || !RangeEnd(ptr, size, &end)) return false;
  auto it = driver->mappings.find(ptr);
  std::uint64_t cursor = ptr;
  while (cursor < end) {
    if (it == driver->mappings.end() || it->first != cursor) return false;
    tiles->push_back(it);
    cursor += it->second.size;
    ++it;
  }
  return cursor == end;
}

}  // namespace

extern "C" {

CUresult cuMemGetAllocationGranularity(size_t* granularity, const abi::CUmemAllocationProp* prop,
                                       abi::CUmemAllocationGranularity_flags option) {
  Driver* driver;
  if (CUresult result = simgpu::GetDriver(&driver); result != abi::CUDA_SUCCESS) return result;
  // The real driver answers without validating the rest of `prop` (type, location, ordinal).
  if (granularity == nullptr || prop == nullptr ||
      (option != abi::CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
       option != abi::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)) {
    return abi::CUDA_ERROR_INVALID_VALUE;
  }
  *granularity = kGranularity;
  return abi::CUDA_SUCCESS;
}

CUresult cuMemCreate(abi::CUmemGenericAllocationHandle* handle, size_t bytes,
                     const abi::CUmemAllocationProp* prop, unsigned long long flags) {
  Driver* driver;
  if (CUresult result = simgpu::GetDriver(&driver); result != abi::CUDA_SUCCESS) return result;
  if (handle == nullptr || prop == nullptr || bytes == 0 || flags != 0 ||
      prop->type != abi::CU_MEM_ALLOCATION_TYPE_PINNED) {
    return abi::CUDA_ERROR_INVALID_VALUE;
  }
  simgpu::PhysicalAllocation allocation{.bytes = bytes};
  if (prop->location.type == abi::CU_MEM_LOCATION_TYPE_DEVICE) {
    if (!driver->ValidOrdinal(prop->location.id)) return abi::CUDA_ERROR_INVALID_DEVICE;
    allocation.ordinal = prop->location.id;
  } else if (!IsHostLocation(prop->location.type)) {
    return abi::CUDA_ERROR_INVALID_VALUE;
  }
  if (bytes % kGranularity != 0) return abi::CUDA_ERROR_INVALID_VALUE;
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

// Drops one handle reference; the memory goes only when no mapping of it is left either.
CUresult cuMemRelease(abi::CUmemGenericAllocationHandle handle) {
  Driver* driver;
  if (CUresult result = simgpu::GetDriver(&driver); result != abi::CUDA_SUCCESS) return result;
  std::lock_guard lock(driver->mu);
  auto it = driver->physical.find(handle);
  if (it == driver->physical.end() || it->second.handle_references == 0) {
    return abi::CUDA_ERROR_INVALID_VALUE;
  }
  --it->second.handle_references;
  DropIfUnusedLocked(driver, it);
  return abi::CUDA_SUCCESS;
}

// Reservations live in the same address space as cuMemAlloc's pointers (the process's reserved
// device region), so neither can overlap the other. They belong to the process, not a context.
CUresult cuMemAddressReserve(abi::CUdeviceptr* ptr, size_t size, size_t alignment,
                             abi::CUdeviceptr addr, unsigned long long flags) {
  Driver* driver;
  if (CUresult result = simgpu::GetDriver(&driver); result != abi::CUDA_SUCCESS) return result;
  const std::uint64_t page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  if (ptr == nullptr || size == 0 || flags != 0 || (alignment != 0 && !IsPowerOfTwo(alignment)) ||
      size % page != 0 || addr % page != 0) {
    return abi::CUDA_ERROR_INVALID_VALUE;
  }
  // Mappings need granularity-aligned addresses, so no reservation starts anywhere else.
  const std::uint64_t align = alignment > kGranularity ? alignment : kGranularity;
  std::lock_guard lock(driver->mu);
  if (driver->slot == nullptr) return abi::CUDA_ERROR_DEINITIALIZED;
  // `addr` is only a hint: taken when it is suitably aligned and free, ignored otherwise.
  abi::CUdeviceptr base = 0;
  if (addr != 0 && addr % align == 0 && driver->allocations.DeviceRangeFree(addr, size)) {
    base = addr;
  } else {
    base = driver->allocations.PlaceDevice(size, align);
  }
  if (base == 0) return abi::CUDA_ERROR_OUT_OF_MEMORY;
  driver->allocations.Insert(
      base, simgpu::Allocation{.size = size, .kind = simgpu::AllocationKind::kReservation});
  *ptr = base;
  return abi::CUDA_SUCCESS;
}

// `ptr` and `size` must be exactly a reservation's, and nothing may be mapped in it.
CUresult cuMemAddressFree(abi::CUdeviceptr ptr, size_t size) {
  Driver* driver;
  if (CUresult result = simgpu::GetDriver(&driver); result != abi::CUDA_SUCCESS) return result;
  if (ptr == 0 || size == 0) return abi::CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(driver->mu);
  abi::CUdeviceptr base = 0;
  simgpu::Allocation reservation;
  if (!driver->allocations.FindContaining(ptr, &base, &reservation) || base != ptr ||
      reservation.kind != simgpu::AllocationKind::kReservation || reservation.size != size) {
    return abi::CUDA_ERROR_INVALID_VALUE;
  }
  // Mappings never cross a reservation's bounds: one starting inside it means it is in use.
  auto mapped = driver->mappings.lower_bound(ptr);
  if (mapped != driver->mappings.end() && mapped->first - ptr < size) {
    return abi::CUDA_ERROR_INVALID_VALUE;
  }
  driver->allocations.Remove(ptr, &reservation);
  return abi::CUDA_SUCCESS;
}

// Maps the whole of `handle` (offset 0, size equal to the allocation's, as the real driver
// requires) at `ptr`, inside one reservation, over no existing mapping.
CUresult cuMemMap(abi::CUdeviceptr ptr, size_t size, size_t offset,
                  abi::CUmemGenericAllocationHandle handle, unsigned long long flags) {
  Driver* driver;
  if (CUresult result = simgpu::GetDriver(&driver); result != abi::CUDA_SUCCESS) return result;
  std::uint64_t end;
  if (ptr == 0 || size == 0 || offset != 0 || flags != 0 || ptr % kGranularity != 0 ||
      size % kGranularity != 0 || !RangeEnd(ptr, size, &end)) {
    return abi::CUDA_ERROR_INVALID_VALUE;
  }
  std::lock_guard lock(driver->mu);
  auto physical = driver->physical.find(handle);
  if (physical == driver->physical.end() || physical->second.handle_references == 0 ||
      physical->second.bytes != size) {
    return abi::CUDA_ERROR_INVALID_VALUE;
  }
  abi::CUdeviceptr base = 0;
  simgpu::Allocation reservation;
  if (!driver->allocations.FindContaining(ptr, &base, &reservation) ||
      reservation.kind != simgpu::AllocationKind::kReservation || end - base > reservation.size) {
    return abi::CUDA_ERROR_INVALID_VALUE;
  }
  auto next = driver->mappings.lower_bound(ptr);
  if (next != driver->mappings.end() && next->first < end) return abi::CUDA_ERROR_INVALID_VALUE;
  if (next != driver->mappings.begin()) {
    auto previous = std::prev(next);
    if (previous->first + previous->second.size > ptr) return abi::CUDA_ERROR_INVALID_VALUE;
  }
  driver->mappings.emplace_hint(next, ptr, simgpu::Mapping{.size = size, .handle = handle});
  ++physical->second.mappings;
  return abi::CUDA_SUCCESS;
}

// Unmaps every mapping of [ptr, ptr + size), which they must cover exactly; an allocation
// whose handle was already released is freed with its last mapping.
CUresult cuMemUnmap(abi::CUdeviceptr ptr, size_t size) {
  Driver* driver;
  if (CUresult result = simgpu::GetDriver(&driver); result != abi::CUDA_SUCCESS) return result;
  if (ptr == 0 || size == 0) return abi::CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(driver->mu);
  std::vector<decltype(Driver::mappings)::iterator> tiles;
  if (!MappingsTiling(driver, ptr, size, &tiles)) return abi::CUDA_ERROR_INVALID_VALUE;
  for (auto mapping : tiles) {
    auto physical = driver->physical.find(mapping->second.handle);
    driver->mappings.erase(mapping);
    if (physical == driver->physical.end()) continue;  // cannot happen: a mapping pins it
    --physical->second.mappings;
    DropIfUnusedLocked(driver, physical);
  }
  return abi::CUDA_SUCCESS;
}

// Validates the request against the mapped range; access rights have no effect here because
// nothing executes, so they are not recorded.
CUresult cuMemSetAccess(abi::CUdeviceptr ptr, size_t size, const abi::CUmemAccessDesc* desc,
                        size_t count) {
  Driver* driver;
  if (CUresult result = simgpu::GetDriver(&driver); result != abi::CUDA_SUCCESS) return result;
  if (ptr == 0 || size == 0 || desc == nullptr || count == 0) {
    return abi::CUDA_ERROR_INVALID_VALUE;
  }
  std::lock_guard lock(driver->mu);
  std::vector<decltype(Driver::mappings)::iterator> tiles;
  if (!MappingsTiling(driver, ptr, size, &tiles)) return abi::CUDA_ERROR_INVALID_VALUE;
  bool all_host = true;
  for (auto mapping : tiles) {
    auto physical = driver->physical.find(mapping->second.handle);
    if (physical != driver->physical.end() && physical->second.ordinal >= 0) all_host = false;
  }
  for (size_t i = 0; i < count; ++i) {
    const abi::CUmemAccessDesc& access = desc[i];
    if (access.flags != abi::CU_MEM_ACCESS_FLAGS_PROT_NONE &&
        access.flags != abi::CU_MEM_ACCESS_FLAGS_PROT_READ &&
        access.flags != abi::CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
      return abi::CUDA_ERROR_INVALID_VALUE;
    }
    if (access.location.type == abi::CU_MEM_LOCATION_TYPE_DEVICE) {
      // CUDA_ERROR_INVALID_VALUE, not INVALID_DEVICE, for an unknown ordinal, as drivers answer.
      if (!driver->ValidOrdinal(access.location.id)) return abi::CUDA_ERROR_INVALID_VALUE;
    } else if (!IsHostLocation(access.location.type) || !all_host) {
      // The host may be granted access to host allocations only.
      return abi::CUDA_ERROR_INVALID_VALUE;
    }
  }
  return abi::CUDA_SUCCESS;
}

// The handle mapped at `addr` (any address inside a mapping), with one more reference that the
// caller must release; this revives a handle released while still mapped.
CUresult cuMemRetainAllocationHandle(abi::CUmemGenericAllocationHandle* handle, void* addr) {
  Driver* driver;
  if (CUresult result = simgpu::GetDriver(&driver); result != abi::CUDA_SUCCESS) return result;
  if (handle == nullptr || addr == nullptr) return abi::CUDA_ERROR_INVALID_VALUE;
  const auto address = reinterpret_cast<abi::CUdeviceptr>(addr);
  std::lock_guard lock(driver->mu);
  auto mapping = driver->mappings.upper_bound(address);
  if (mapping == driver->mappings.begin()) return abi::CUDA_ERROR_INVALID_VALUE;
  --mapping;
  if (address - mapping->first >= mapping->second.size) return abi::CUDA_ERROR_INVALID_VALUE;
  auto physical = driver->physical.find(mapping->second.handle);
  if (physical == driver->physical.end()) return abi::CUDA_ERROR_INVALID_VALUE;
  ++physical->second.handle_references;
  *handle = mapping->second.handle;
  return abi::CUDA_SUCCESS;
}

}  // extern "C"
