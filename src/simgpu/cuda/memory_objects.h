// Memory objects of the simulated driver that are not plain device pointers: memory pools,
// CUDA arrays (and mipmapped arrays), and physical allocations of the virtual memory API.
#pragma once

#include <cstdint>

#include "abi/cuda_abi.h"
#include "simgpu/cuda/context.h"

namespace gpufrac::simgpu {

struct MemPool {
  static constexpr std::uint32_t kMagic = 0x506f6f6c;

  std::uint32_t magic = kMagic;
  abi::CUmemLocationType location = abi::CU_MEM_LOCATION_TYPE_DEVICE;
  int ordinal = -1;  // the device a DEVICE pool allocates on
  bool is_default = false;
};

inline abi::CUmemoryPool ToHandle(MemPool* pool) {
  return reinterpret_cast<abi::CUmemoryPool>(pool);
}

struct ArrayObject {
  static constexpr std::uint32_t kMagic = 0x41727279;

  std::uint32_t magic = kMagic;
  Context* context = nullptr;
  bool mipmapped = false;
  std::uint64_t bytes = 0;  // device memory charged
};

// A cuMemCreate allocation: device memory when it lives on a device, none for host locations.
// It exists while either count is non-zero: cuMemRelease drops a handle reference, cuMemUnmap a
// mapping, and only when both reach zero is its device memory returned (as NVIDIA documents).
struct PhysicalAllocation {
  int ordinal = -1;  // -1 for host memory
  std::uint64_t bytes = 0;
  std::uint64_t handle_references = 1;  // cuMemCreate's, plus one per cuMemRetainAllocationHandle
  std::uint64_t mappings = 0;           // live cuMemMap mappings of it
};

// One cuMemMap: `size` bytes of address space (inside a reservation) backed by the whole of
// allocation `handle`.
struct Mapping {
  std::uint64_t size = 0;
  abi::CUmemGenericAllocationHandle handle = 0;
};

}  // namespace gpufrac::simgpu
