// A lock-free, fixed-capacity map from a driver handle (device pointer, array, memory handle,
// context) to what was charged for it, so that the matching free releases exactly that amount.
// Open addressing with linear probing; O(1) expected, heap-free after Init (one anonymous mapping,
// whose pages the kernel only backs once touched).
//
// Concurrency contract: a key is inserted at most once while live (the driver never hands out a
// handle that is still allocated) and is taken only after it was inserted, which the callers
// guarantee by inserting before returning the handle to the program and taking before calling
// the driver's free.
#pragma once

#include <sys/mman.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace gpufrac::limiter {

struct ChargeRecord {
  uint64_t bytes;
  int gpu;  // index into the limit configuration
};

class AllocTable {
 public:
  constexpr AllocTable() = default;
  // `capacity` must be a power of two.
  bool Init(size_t capacity) {
    void* p = mmap(nullptr, capacity * sizeof(Slot), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return false;
    slots_ = static_cast<Slot*>(p);
    mask_ = capacity - 1;
    return true;
  }
  bool ready() const { return slots_ != nullptr; }

  // False if the table is full (too many live allocations to track).
  bool Insert(uint64_t key, ChargeRecord charge) {
    if (key <= kTombstone) return false;
    uint64_t value = Pack(charge);
    for (size_t n = 0, i = Hash(key); n <= mask_; ++n, i = (i + 1) & mask_) {
      uint64_t k = slots_[i].key.load(std::memory_order_acquire);
      if (k != kEmpty && k != kTombstone) continue;
      // Claimed (kBusy), filled, then published: once its key is visible the slot is complete.
      if (slots_[i].key.compare_exchange_strong(k, kBusy, std::memory_order_acq_rel)) {
        slots_[i].value.store(value, std::memory_order_relaxed);
        slots_[i].key.store(key, std::memory_order_release);
        return true;
      }
    }
    return false;
  }

  // Looks `key` up without removing it.
  bool Find(uint64_t key, ChargeRecord* out) const {
    if (key <= kTombstone) return false;
    for (size_t n = 0, i = Hash(key); n <= mask_; ++n, i = (i + 1) & mask_) {
      uint64_t k = slots_[i].key.load(std::memory_order_acquire);
      if (k == kEmpty) return false;
      if (k == key) {
        *out = Unpack(slots_[i].value.load(std::memory_order_relaxed));
        return true;
      }
    }
    return false;
  }

  // Removes `key` and returns its charge; false if it is not there (never charged).
  bool Take(uint64_t key, ChargeRecord* out) {
    if (key <= kTombstone) return false;
    for (size_t n = 0, i = Hash(key); n <= mask_; ++n, i = (i + 1) & mask_) {
      uint64_t k = slots_[i].key.load(std::memory_order_acquire);
      if (k == kEmpty) return false;
      if (k != key) continue;
      uint64_t value = slots_[i].value.load(std::memory_order_relaxed);
      if (!slots_[i].key.compare_exchange_strong(k, kTombstone, std::memory_order_acq_rel)) {
        return false;  // taken concurrently (a double free): the first free releases it
      }
      *out = Unpack(value);
      return true;
    }
    return false;
  }

 private:
  // Reserved key values; real handles are never this small.
  static constexpr uint64_t kEmpty = 0;
  static constexpr uint64_t kBusy = 1;
  static constexpr uint64_t kTombstone = 2;

  struct Slot {
    std::atomic<uint64_t> key;
    std::atomic<uint64_t> value;
  };

  // Handles are addresses, at least 256-byte aligned: dropping the low bits keeps neighbouring
  // allocations in neighbouring slots (cache- and TLB-friendly), and folding in the high bits
  // spreads separate address ranges apart.
  size_t Hash(uint64_t key) const { return static_cast<size_t>((key >> 8) ^ (key >> 29)) & mask_; }
  static uint64_t Pack(ChargeRecord c) {
    return c.bytes << 8 | static_cast<uint64_t>(c.gpu & 0xff);
  }
  static ChargeRecord Unpack(uint64_t v) {
    return ChargeRecord{v >> 8, static_cast<int>(v & 0xff)};
  }

  Slot* slots_ = nullptr;
  size_t mask_ = 0;
};

}  // namespace gpufrac::limiter
