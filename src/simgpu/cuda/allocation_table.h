// The process's device address space: which address ranges are allocated, to what, and where
// the next allocation goes. 64-bit allocations come from a reserved (PROT_NONE) region so they
// never collide with host memory; legacy 32-bit ones come from below 4 GiB.
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "abi/cuda_abi.h"
#include "simgpu/cuda/context.h"

namespace gpufrac::simgpu {

enum class AllocationKind : std::uint8_t {
  kDevice,         // cuMemAlloc, cuMemAllocPitch
  kLegacy32,       // cuMemAlloc (v1)
  kManaged,        // cuMemAllocManaged: host-accessible, charged to the device
  kStreamOrdered,  // cuMemAllocAsync / cuMemAllocFromPoolAsync on a device pool
  kHostPool,       // cuMemAllocFromPoolAsync on a host pool: host memory, no device charge
  kReservation,    // cuMemAddressReserve: address range only, no memory, no context; cuMemFree
                   // refuses it
};

struct Allocation {
  std::uint64_t size = 0;     // bytes of address range the caller asked for
  std::uint64_t charged = 0;  // device bytes charged to `ordinal`
  int ordinal = -1;
  Context* context = nullptr;
  AllocationKind kind = AllocationKind::kDevice;
  void* host_mapping = nullptr;  // backing memory of host-accessible kinds
};

class AllocationTable {
 public:
  AllocationTable();
  ~AllocationTable();
  AllocationTable(const AllocationTable&) = delete;
  AllocationTable& operator=(const AllocationTable&) = delete;

  // A free address range of `size` bytes in the 64-bit (or legacy 32-bit) region, aligned to
  // 512 bytes or to `alignment` (a power of two) if larger; 0 if the region has no room.
  abi::CUdeviceptr PlaceDevice(std::uint64_t size, std::uint64_t alignment = 0) {
    return Place(device_, size, alignment);
  }
  abi::CUdeviceptr PlaceLegacy32(std::uint64_t size) { return Place(legacy32_, size, 0); }

  // Whether [base, base + size) lies in the 64-bit region and overlaps no recorded range.
  bool DeviceRangeFree(abi::CUdeviceptr base, std::uint64_t size) const;

  void Insert(abi::CUdeviceptr base, const Allocation& allocation);

  // Removes the allocation starting exactly at `base`; false if there is none.
  bool Remove(abi::CUdeviceptr base, Allocation* removed);

  // The allocation containing `address`; false if none does.
  bool FindContaining(abi::CUdeviceptr address, abi::CUdeviceptr* base, Allocation* found) const;

  // Removes and returns every allocation made in `context`.
  std::vector<Allocation> RemoveContext(const Context* context);

 private:
  struct Region {
    std::uint64_t begin = 0;
    std::uint64_t end = 0;
    std::uint64_t cursor = 0;  // next-fit: where the last placement ended
  };

  abi::CUdeviceptr Place(Region& region, std::uint64_t size, std::uint64_t alignment);

  std::map<abi::CUdeviceptr, Allocation> by_base_;
  void* reserved_ = nullptr;  // the PROT_NONE mapping behind device_
  std::uint64_t reserved_bytes_ = 0;
  Region device_;
  Region legacy32_;
};

}  // namespace gpufrac::simgpu
