// Next-fit placement of simulated device allocations in the process's address space.
#include "simgpu/cuda/allocation_table.h"

#include <sys/mman.h>

#include <iterator>

namespace gpufrac::simgpu {
namespace {

constexpr std::uint64_t kAlignment = 512;
constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;
// Room for every device's memory several times over; halved until the kernel grants it.
constexpr std::uint64_t kDeviceRegionBytes = std::uint64_t{4096} * kGiB;
constexpr std::uint64_t kMinDeviceRegionBytes = 64 * kGiB;
// Legacy pointers are 32-bit: [256 MiB, 4 GiB). Nothing is mapped there; the numbers only have
// to be unique and below 4 GiB.
constexpr std::uint64_t kLegacyBegin = 256ull << 20;
constexpr std::uint64_t kLegacyEnd = 4 * kGiB;

std::uint64_t AlignUp(std::uint64_t value, std::uint64_t alignment = kAlignment) {
  return (value + alignment - 1) & ~(alignment - 1);
}

}  // namespace

AllocationTable::AllocationTable() {
  // Reserving (not committing) the range keeps host mappings, e.g. managed memory, out of it.
  for (std::uint64_t bytes = kDeviceRegionBytes; bytes >= kMinDeviceRegionBytes; bytes /= 2) {
    void* base =
        ::mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base != MAP_FAILED) {
      reserved_ = base;
      reserved_bytes_ = bytes;
      device_.begin = AlignUp(reinterpret_cast<std::uint64_t>(base));
      device_.end = reinterpret_cast<std::uint64_t>(base) + bytes;
      break;
    }
  }
  device_.cursor = device_.begin;
  legacy32_ = Region{.begin = kLegacyBegin, .end = kLegacyEnd, .cursor = kLegacyBegin};
}

AllocationTable::~AllocationTable() {
  if (reserved_ != nullptr) ::munmap(reserved_, reserved_bytes_);
}

abi::CUdeviceptr AllocationTable::Place(Region& region, std::uint64_t size,
                                        std::uint64_t alignment) {
  if (alignment < kAlignment) alignment = kAlignment;
  if (size == 0 || size > region.end - region.begin) return 0;
  std::uint64_t cursor = AlignUp(region.cursor, alignment);
  bool wrapped = false;
  while (true) {
    // A cursor that wrapped past 2^64 while aligning comes out below the region.
    if (cursor < region.begin || cursor > region.end || size > region.end - cursor) {
      if (wrapped) return 0;
      wrapped = true;
      cursor = AlignUp(region.begin, alignment);
      continue;
    }
    auto next = by_base_.lower_bound(cursor);
    if (next != by_base_.begin()) {
      auto previous = std::prev(next);
      const std::uint64_t previous_end = previous->first + previous->second.size;
      if (previous_end > cursor) {
        cursor = AlignUp(previous_end, alignment);
        continue;
      }
    }
    if (next != by_base_.end() && next->first < cursor + size) {
      cursor = AlignUp(next->first + next->second.size, alignment);
      continue;
    }
    region.cursor = AlignUp(cursor + size);
    return cursor;
  }
}

bool AllocationTable::DeviceRangeFree(abi::CUdeviceptr base, std::uint64_t size) const {
  if (size == 0 || base < device_.begin || base > device_.end || size > device_.end - base) {
    return false;
  }
  auto next = by_base_.lower_bound(base);
  if (next != by_base_.end() && next->first < base + size) return false;
  if (next != by_base_.begin()) {
    auto previous = std::prev(next);
    if (previous->first + previous->second.size > base) return false;
  }
  return true;
}

void AllocationTable::Insert(abi::CUdeviceptr base, const Allocation& allocation) {
  by_base_.emplace(base, allocation);
}

bool AllocationTable::Remove(abi::CUdeviceptr base, Allocation* removed) {
  auto it = by_base_.find(base);
  if (it == by_base_.end()) return false;
  *removed = it->second;
  by_base_.erase(it);
  return true;
}

bool AllocationTable::FindContaining(abi::CUdeviceptr address, abi::CUdeviceptr* base,
                                     Allocation* found) const {
  auto it = by_base_.upper_bound(address);
  if (it == by_base_.begin()) return false;
  --it;
  if (address - it->first >= it->second.size) return false;
  *base = it->first;
  *found = it->second;
  return true;
}

std::vector<Allocation> AllocationTable::RemoveContext(const Context* context) {
  std::vector<Allocation> removed;
  for (auto it = by_base_.begin(); it != by_base_.end();) {
    if (it->second.context == context) {
      removed.push_back(it->second);
      it = by_base_.erase(it);
    } else {
      ++it;
    }
  }
  return removed;
}

}  // namespace gpufrac::simgpu
