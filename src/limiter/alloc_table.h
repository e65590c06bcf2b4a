// A lock-free, fixed-capacity map from a driver handle (device pointer, array, memory handle,
// context) to what was charged for it, so that the matching free releases exactly that amount.
// Open addressing with linear probing; O(1) expected, heap-free after Init (one anonymous mapping,
// whose pages the kernel only backs once touched). Up to three parts of growing size: an entry goes
// to the first part that has a free slot within a short probe, so that while few entries are live
// the slots in use stay in the CPU's nearest caches (the driver rarely hands the same address out
// twice, so each new entry lands on a new slot), and the last, large part takes the rest. Lookups
// never probe further than the longest probe any insertion needed, so freed slots (tombstones)
// cannot make misses slow.
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
#include <initializer_list>

namespace gpufrac::limiter {

struct ChargeRecord {
  uint64_t bytes;
  int gpu;         // index into the limit configuration
  uint64_t owner;  // the context whose destruction frees the memory (0: none); for memory
                   // handles, the number of references (see AddReferences)
};

class AllocTable {
 public:
  constexpr AllocTable() = default;
  // A part: its slots (a power of two) and how far an insertion looks there before it moves on
  // to the next part (0: everywhere; the last part always looks everywhere). A part's lookups
  // walk that far once it is crowded.
  struct PartSize {
    size_t slots;
    size_t probes = 0;
  };
  // The parts, smallest first (three at most). Parts after the first cost nothing until used.
  bool Init(std::initializer_list<PartSize> parts) {
    if (parts.size() == 0 || parts.size() > kMaxParts) return false;
    size_t total = 0;
    for (const PartSize& p : parts) total += p.slots;
    void* p = mmap(nullptr, total * sizeof(Slot), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return false;
    Slot* slots = static_cast<Slot*>(p);
    parts_ = 0;
    for (const PartSize& size : parts) {
      Part& part = part_[parts_++];
      part.slots = slots;
      part.mask = size.slots - 1;
      part.probes =
          size.probes == 0 || parts_ == static_cast<int>(parts.size()) ? size.slots : size.probes;
      slots += size.slots;
    }
    parts_used_.store(1, std::memory_order_release);
    return true;
  }

  // False if the table is full (too many live allocations to track).
  bool Insert(uint64_t key, ChargeRecord charge) {
    if (key <= kTombstone) return false;
    for (int i = 0; i < parts_; ++i) {
      // Raised before the entry goes in, so that whoever looks the key up later searches there.
      int used = parts_used_.load(std::memory_order_relaxed);
      while (used <= i && !parts_used_.compare_exchange_weak(used, i + 1, std::memory_order_release,
                                                             std::memory_order_relaxed)) {
      }
      if (part_[i].Insert(key, charge)) return true;
    }
    return false;
  }

  // Looks `key` up without removing it.
  bool Find(uint64_t key, ChargeRecord* out) const {
    Slot* slot = Locate(key);
    if (!slot) return false;
    *out = Read(*slot);
    return true;
  }

  // Removes `key` and returns its charge; false if it is not there (never charged).
  bool Take(uint64_t key, ChargeRecord* out) {
    Slot* slot = Locate(key);
    return slot && TakeSlot(*slot, key, out);
  }

  // For tables whose third word counts references instead of naming an owner (memory handles):
  // adds `delta` and returns the new count, or -1 if `key` is not there.
  int64_t AddReferences(uint64_t key, int64_t delta) {
    Slot* slot = Locate(key);
    if (!slot) return -1;
    return static_cast<int64_t>(slot->owner.fetch_add(static_cast<uint64_t>(delta))) + delta;
  }

  // The most slots a lookup examines in the first part: the longest probe an insertion needed.
  size_t longest_probe() const { return part_[0].max_probe.load(std::memory_order_relaxed) + 1; }
  // The number of parts entries have gone to so far (they fill in order).
  int parts_used() const { return parts_used_.load(std::memory_order_acquire); }

  // Removes every entry owned by `owner` (a context the driver destroyed, and its memory with it),
  // calling `release(key, charge)` for each. Visits the whole table: for rare events only.
  template <typename Release>
  void TakeAllOwnedBy(uint64_t owner, Release release) {
    if (owner == 0) return;
    for (int i = 0, n = parts_used(); i < n; ++i) part_[i].TakeAllOwnedBy(owner, release);
  }

 private:
  // Reserved key values; real handles are never this small.
  static constexpr uint64_t kEmpty = 0;
  static constexpr uint64_t kBusy = 1;
  static constexpr uint64_t kTombstone = 2;
  static constexpr int kMaxParts = 3;

  struct Slot {
    std::atomic<uint64_t> key;
    std::atomic<uint64_t> value;
    std::atomic<uint64_t> owner;
  };

  static uint64_t Pack(ChargeRecord c) {
    return c.bytes << 8 | static_cast<uint64_t>(c.gpu & 0xff);
  }

  static ChargeRecord Read(const Slot& slot) {
    uint64_t v = slot.value.load(std::memory_order_relaxed);
    return ChargeRecord{v >> 8, static_cast<int>(v & 0xff),
                        slot.owner.load(std::memory_order_relaxed)};
  }

  // False if someone else took it first (a double free): only the first free releases.
  static bool TakeSlot(Slot& slot, uint64_t key, ChargeRecord* out) {
    ChargeRecord charge = Read(slot);
    if (!slot.key.compare_exchange_strong(key, kTombstone, std::memory_order_acq_rel)) {
      return false;
    }
    *out = charge;
    return true;
  }

  // One open-addressing table with linear probing.
  struct Part {
    Slot* slots = nullptr;
    size_t mask = 0;
    size_t probes = 0;
    std::atomic<size_t> max_probe{0};

    // Handles are addresses, at least 256-byte aligned: dropping the low bits keeps neighbouring
    // allocations in neighbouring slots (cache- and TLB-friendly), and folding in the high bits
    // spreads separate address ranges apart.
    size_t Hash(uint64_t key) const { return static_cast<size_t>((key >> 8) ^ (key >> 29)) & mask; }

    // Looks at `probes` slots at most.
    bool Insert(uint64_t key, ChargeRecord charge) {
      for (size_t n = 0, i = Hash(key); n < probes && n <= mask; ++n, i = (i + 1) & mask) {
        uint64_t k = slots[i].key.load(std::memory_order_acquire);
        if (k != kEmpty && k != kTombstone) continue;
        // Claimed (kBusy), filled, then published: once its key is visible the slot is complete.
        if (slots[i].key.compare_exchange_strong(k, kBusy, std::memory_order_acq_rel)) {
          slots[i].value.store(Pack(charge), std::memory_order_relaxed);
          slots[i].owner.store(charge.owner, std::memory_order_relaxed);
          size_t longest = max_probe.load(std::memory_order_relaxed);
          while (n > longest && !max_probe.compare_exchange_weak(longest, n)) {
          }
          slots[i].key.store(key, std::memory_order_release);
          return true;
        }
      }
      return false;
    }

    Slot* Locate(uint64_t key) const {
      size_t longest = max_probe.load(std::memory_order_acquire);
      for (size_t n = 0, i = Hash(key); n <= longest; ++n, i = (i + 1) & mask) {
        uint64_t k = slots[i].key.load(std::memory_order_acquire);
        if (k == key) return &slots[i];
        if (k == kEmpty) return nullptr;
      }
      return nullptr;
    }

    template <typename Release>
    void TakeAllOwnedBy(uint64_t owner, Release& release) {
      for (size_t i = 0; i <= mask; ++i) {
        uint64_t k = slots[i].key.load(std::memory_order_acquire);
        ChargeRecord charge;
        if (k > kTombstone && slots[i].owner.load(std::memory_order_relaxed) == owner &&
            TakeSlot(slots[i], k, &charge)) {
          release(k, charge);
        }
      }
    }
  };

  Slot* Locate(uint64_t key) const {
    if (key <= kTombstone) return nullptr;
    for (int i = 0, n = parts_used(); i < n; ++i) {
      if (Slot* slot = part_[i].Locate(key)) return slot;
    }
    return nullptr;
  }

  Part part_[kMaxParts];
  int parts_ = 0;
  std::atomic<int> parts_used_{0};
};

}  // namespace gpufrac::limiter
