// The compute arbiter (see compute_arbiter.h).
#include "limiter/compute_arbiter.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <climits>
#include <cstddef>
#include <cstdio>
#include <cstring>

#include "limiter/arbiter_guard.h"
#include "limiter/file_stat.h"

namespace gpufrac::limiter {
namespace {

// The longest one futex sleep lasts before the waiter looks again.
constexpr uint64_t kMaxSleepNs = 50'000'000;
// How long a lock may take before the caller gives up on arbitration for this launch.
constexpr long kLockTimeoutNs = 100'000'000;

uint64_t WorkloadKey(const char* workload) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (const char* p = workload; *p; ++p) {
    h ^= static_cast<unsigned char>(*p);
    h *= 1099511628211ULL;
  }
  return h == 0 ? 1 : h;
}

void FutexWait(std::atomic<uint32_t>* word, uint32_t seen, uint64_t ns) {
  timespec timeout{static_cast<time_t>(ns / 1'000'000'000u),
                   static_cast<long>(ns % 1'000'000'000u)};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, seen, &timeout, nullptr, 0);
}

void FutexWakeAll(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// How long before `now` moment `at` was (0 for a moment after it: clocks read under a lock and
// before it).
uint64_t Age(uint64_t now, uint64_t at) { return now > at ? now - at : 0; }

int SlotOf(uint64_t holder) { return static_cast<int>(holder >> 32) - 1; }
pid_t PidOf(uint64_t holder) { return static_cast<pid_t>(holder & 0xffffffffu); }

}  // namespace

uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

bool ComputeArbiter::CreateAt(int dir_fd, const char* name, uint64_t turn_ns, char* err,
                              size_t err_len) {
  int fd = openat(dir_fd, name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0 && errno == EEXIST) {
    // Made earlier by this launcher: only it creates names in its directory. Kept if it is what
    // this version makes (workloads may be using it); else (an older version's) replaced, and
    // workloads still mapping the old one take turns there until they end.
    fd = openat(dir_fd, name, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    uint64_t magic = 0;
    uint32_t version = 0;
    const off_t size = static_cast<off_t>(sizeof(ArbiterSegment));
    bool current =
        fd >= 0 && StatFd(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size >= size &&
        st.st_uid == geteuid() &&
        pread(fd, &magic, sizeof(magic), offsetof(ArbiterSegment, magic)) == sizeof(magic) &&
        pread(fd, &version, sizeof(version), offsetof(ArbiterSegment, version)) ==
            sizeof(version) &&
        magic == kArbiterMagic && version == kArbiterVersion;
    // A workload may write past its end (every one may write it): cut back to its size, which
    // gives the pages back and touches nothing a workload maps. Replacing it instead would need
    // new pages while the grown ones are still held, and fail on a full filesystem.
    if (current && st.st_size > size) current = ftruncate(fd, size) == 0;
    if (fd >= 0) close(fd);
    if (current) return true;
    if (unlinkat(dir_fd, name, 0) != 0) {
      snprintf(err, err_len, "%s is not a compute arbiter and cannot be replaced: %s", name,
               strerror(errno));
      return false;
    }
    fd = openat(dir_fd, name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  }
  if (fd < 0) {
    snprintf(err, err_len, "cannot create the compute arbiter %s: %s", name, strerror(errno));
    return false;
  }
  void* map = MAP_FAILED;
  // The pages are taken before they are written: on a full tmpfs (a user may fill /dev/shm),
  // writing them through the mapping would raise SIGBUS in the root service making the arbiter.
  int e = ftruncate(fd, sizeof(ArbiterSegment)) == 0 ? 0 : errno;
  if (e == 0) e = posix_fallocate(fd, 0, sizeof(ArbiterSegment));
  if (e == 0) {
    map = mmap(nullptr, sizeof(ArbiterSegment), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) e = errno;
  }
  if (map == MAP_FAILED) {
    snprintf(err, err_len, "cannot size the compute arbiter %s: %s", name, strerror(e));
    close(fd);
    unlinkat(dir_fd, name, 0);
    return false;
  }
  auto* seg = static_cast<ArbiterSegment*>(map);
  seg->magic = kArbiterMagic;
  seg->version = kArbiterVersion;
  seg->turn_ns = turn_ns;
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(&seg->lock, &attr);
  pthread_mutexattr_destroy(&attr);
  seg->ready.store(1, std::memory_order_release);
  munmap(map, sizeof(ArbiterSegment));
  // Every workload on the GPU takes turns through it; none can create names beside it.
  fchmod(fd, 0666);
  close(fd);
  return true;
}

bool ComputeArbiter::Peek(int dir_fd, const char* name, const char* workload, Peeked* out) {
  int fd = openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st;
  bool found = false;
  if (StatFd(fd, &st) == 0 && S_ISREG(st.st_mode) &&
      st.st_size == static_cast<off_t>(sizeof(ArbiterSegment))) {
    const uint64_t key = WorkloadKey(workload);
    uint64_t holder = 0;
    if (pread(fd, &holder, sizeof(holder), offsetof(ArbiterSegment, holder)) !=
        static_cast<ssize_t>(sizeof(holder))) {
      holder = 0;
    }
    for (int s = 0; s < kArbiterSlots && !found; ++s) {
      const off_t at =
          static_cast<off_t>(offsetof(ArbiterSegment, slots) + s * sizeof(ArbiterSlot));
      uint64_t slot_key = 0;
      uint64_t used = 0;
      if (pread(fd, &slot_key, sizeof(slot_key), at + offsetof(ArbiterSlot, key)) ==
              static_cast<ssize_t>(sizeof(slot_key)) &&
          slot_key == key &&
          pread(fd, &used, sizeof(used), at + offsetof(ArbiterSlot, used_ns)) ==
              static_cast<ssize_t>(sizeof(used))) {
        out->used_ns = used;
        out->holds_turn = holder >> 32 == static_cast<uint64_t>(s) + 1;
        found = true;
      }
    }
  }
  close(fd);
  return found;
}

bool ComputeArbiter::Attach(const char* dir, const char* name, const char* workload,
                            uint32_t weight, uint32_t limit, char* err, size_t err_len) {
  char path[512];
  if (snprintf(path, sizeof(path), "%s/%s", dir, name) >= static_cast<int>(sizeof(path))) {
    snprintf(err, err_len, "the compute arbiter's path is too long");
    return false;
  }
  int fd = open(path, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || StatFd(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
      st.st_size != static_cast<off_t>(sizeof(ArbiterSegment))) {
    snprintf(err, err_len, "no compute arbiter at %s%s%s", path, fd < 0 ? ": " : "",
             fd < 0 ? strerror(errno) : "");
    if (fd >= 0) close(fd);
    return false;
  }
  void* map = mmap(nullptr, sizeof(ArbiterSegment), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (map == MAP_FAILED) {
    snprintf(err, err_len, "cannot map the compute arbiter %s: %s", path, strerror(errno));
    return false;
  }
  auto* seg = static_cast<ArbiterSegment*>(map);
  // Another workload truncating the file must not kill this process (arbiter_guard.h), from
  // the first read on.
  const bool guarded = GuardArbiter(seg);
  auto unmap = [&] {
    if (guarded) UnguardArbiter(seg);
    munmap(map, sizeof(ArbiterSegment));
    seg_ = nullptr;
  };
  if (seg->magic != kArbiterMagic || seg->version != kArbiterVersion ||
      seg->ready.load(std::memory_order_acquire) != 1 || seg->turn_ns == 0) {
    snprintf(err, err_len, "%s is not a compute arbiter of this version", path);
    unmap();
    return false;
  }
  seg_ = seg;
  if (weight == 0) weight = 1;
  if (limit < weight) limit = weight;
  if (!Lock()) {
    snprintf(err, err_len, "the compute arbiter %s is held by a process that does not let go",
             path);
    unmap();
    return false;
  }
  key_ = WorkloadKey(workload);
  weight_ = weight;
  limit_milli_ = limit;
  const bool joined = JoinLocked(MonotonicNs());
  Unlock();
  if (!joined) {
    snprintf(err, err_len, "the compute arbiter %s has no free slot (%d workloads in use)", path,
             kArbiterSlots);
    unmap();
    return false;
  }
  if (guarded) SetGuardedSlot(seg_, slot_);
  return true;
}

bool ComputeArbiter::JoinLocked(uint64_t now) {
  // Its own slot if it has one; else a free one, or one of a workload not heard from for
  // kStaleNs (ended: a live waiter is heard from every kMaxSleepNs); never the holder's.
  const int holding = SlotOf(seg_->holder.load(std::memory_order_relaxed));
  int found = -1, spare = -1;
  for (int s = 0; s < kArbiterSlots && found < 0; ++s) {
    const ArbiterSlot& slot = seg_->slots[s];
    const uint64_t k = slot.key.load(std::memory_order_relaxed);
    if (k == key_) found = s;
    const bool stale =
        k == 0 ||
        (s != holding && Age(now, slot.busy_at_ns.load(std::memory_order_relaxed)) > kStaleNs);
    if (stale && spare < 0) spare = s;
  }
  if (found < 0 && spare >= 0) {
    ArbiterSlot& slot = seg_->slots[spare];
    slot.key.store(0, std::memory_order_relaxed);
    slot.weight.store(weight_, std::memory_order_relaxed);
    slot.limit.store(limit_milli_, std::memory_order_relaxed);
    slot.waiting.store(0, std::memory_order_relaxed);
    slot.vtime.store(0, std::memory_order_relaxed);
    slot.tokens_ns.store(static_cast<int64_t>(seg_->turn_ns / 2), std::memory_order_relaxed);
    slot.tokens_at_ns.store(now, std::memory_order_relaxed);
    slot.used_ns.store(0, std::memory_order_relaxed);
    slot.estimated_ns.store(0, std::memory_order_relaxed);
    slot.measured_mark_ns.store(0, std::memory_order_relaxed);
    slot.busy_at_ns.store(now, std::memory_order_relaxed);
    slot.missed_at_ns.store(0, std::memory_order_relaxed);
    slot.key.store(key_, std::memory_order_release);
    found = spare;
  }
  if (found < 0) return false;
  slot_ = found;
  token_ = (static_cast<uint64_t>(slot_) + 1) << 32 | static_cast<uint32_t>(getpid());
  limited_ = limit_milli_ < 1000;
  return true;
}

bool ComputeArbiter::Lock() {
  timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_nsec += kLockTimeoutNs;
  if (deadline.tv_nsec >= 1'000'000'000) {
    deadline.tv_sec += 1;
    deadline.tv_nsec -= 1'000'000'000;
  }
  int rc = pthread_mutex_timedlock(&seg_->lock, &deadline);
  if (rc == EOWNERDEAD) {
    pthread_mutex_consistent(&seg_->lock);  // Its holder died between two plain stores.
    rc = 0;
  }
  return rc == 0;
}

bool ComputeArbiter::TryLock() {
  int rc = pthread_mutex_trylock(&seg_->lock);
  if (rc == EOWNERDEAD) {
    pthread_mutex_consistent(&seg_->lock);
    rc = 0;
  }
  return rc == 0;
}

void ComputeArbiter::Unlock() { pthread_mutex_unlock(&seg_->lock); }

void ComputeArbiter::Refill(int s, uint64_t now) {
  ArbiterSlot& slot = seg_->slots[s];
  const uint32_t limit = slot.limit.load(std::memory_order_relaxed);
  const uint64_t at = slot.tokens_at_ns.load(std::memory_order_relaxed);
  if (limit >= 1000 || now <= at) return;
  int64_t tokens = slot.tokens_ns.load(std::memory_order_relaxed) +
                   static_cast<int64_t>((now - at) * limit / 1000);
  const int64_t cap = static_cast<int64_t>(seg_->turn_ns / 2);
  slot.tokens_ns.store(tokens > cap ? cap : tokens, std::memory_order_relaxed);
  slot.tokens_at_ns.store(now, std::memory_order_relaxed);
}

bool ComputeArbiter::Eligible(int s, uint64_t now) {
  ArbiterSlot& slot = seg_->slots[s];
  if (slot.limit.load(std::memory_order_relaxed) >= 1000) return true;
  Refill(s, now);
  return slot.tokens_ns.load(std::memory_order_relaxed) >= static_cast<int64_t>(seg_->turn_ns / 4);
}

void ComputeArbiter::Charge(int s, uint64_t ns) {
  // A span that ends before it starts (clocks read on either side of a lock) charges nothing.
  if (s < 0 || s >= kArbiterSlots || ns > (uint64_t{1} << 62)) return;
  ArbiterSlot& slot = seg_->slots[s];
  uint32_t weight = slot.weight.load(std::memory_order_relaxed);
  if (weight == 0) weight = 1;
  slot.used_ns.fetch_add(ns, std::memory_order_relaxed);
  slot.estimated_ns.fetch_add(ns, std::memory_order_relaxed);
  slot.busy_at_ns.store(MonotonicNs(), std::memory_order_relaxed);
  slot.vtime.fetch_add(ns * 1000 / weight, std::memory_order_relaxed);
  if (slot.limit.load(std::memory_order_relaxed) < 1000) {
    slot.tokens_ns.fetch_sub(static_cast<int64_t>(ns), std::memory_order_relaxed);
  }
}

void ComputeArbiter::ChargeMeasured(std::optional<uint64_t> measured) {
  ArbiterSlot& slot = seg_->slots[slot_];
  const uint64_t estimated = slot.estimated_ns.load(std::memory_order_relaxed);
  const uint64_t since = estimated - slot.measured_mark_ns.exchange(estimated);
  if (!measured.has_value()) return;  // a new baseline: the estimates since the last one stand
  const uint64_t ns = *measured;
  if (ns > (uint64_t{1} << 62) || since > (uint64_t{1} << 62)) return;  // written by someone else
  const uint32_t weight = std::max<uint32_t>(slot.weight.load(std::memory_order_relaxed), 1);
  // The difference, either way, without going below nothing.
  auto adjust = [](std::atomic<uint64_t>& value, uint64_t add, uint64_t remove) {
    const uint64_t v = value.load(std::memory_order_relaxed);
    value.store(v + add > remove ? v + add - remove : 0, std::memory_order_relaxed);
  };
  adjust(slot.used_ns, ns, since);
  adjust(slot.vtime, ns * 1000 / weight, since * 1000 / weight);
  if (slot.limit.load(std::memory_order_relaxed) < 1000) {
    slot.tokens_ns.fetch_sub(static_cast<int64_t>(ns) - static_cast<int64_t>(since),
                             std::memory_order_relaxed);
  }
}

void ComputeArbiter::Measure() {
  using Measured = GpuTimeSource::Measured;
  if (measure_ == nullptr) return;
  const uint64_t now = MonotonicNs();
  // The launch path's usual case: nothing due, nothing waiting (two loads, no lock).
  if (now < measure_->NextPollNs() && !has_unapplied_.load(std::memory_order_relaxed)) return;
  if (pthread_mutex_trylock(&measure_lock_) != 0) return;
  uint64_t ns = 0;
  switch (measure_->Take(now, &ns)) {
    case Measured::kTime:
      unapplied_ns_ += ns;
      if (unapplied_ == Measured::kNothing) unapplied_ = Measured::kTime;
      break;
    case Measured::kBaseline:  // what is pending, and what was charged since, stands
      unapplied_ = Measured::kBaseline;
      unapplied_ns_ = 0;
      break;
    case Measured::kNothing:
      break;
  }
  // Going without turns, it takes the GPU's equal split uncharged (as its turns are): what it
  // used meanwhile is not charged when it comes back, counting starts again.
  if (unapplied_ != Measured::kNothing && bypass_until_ns_.load(std::memory_order_relaxed) > now) {
    unapplied_ = Measured::kBaseline;
    unapplied_ns_ = 0;
  }
  // Never waits on the arbiter's lock (a stuck or hostile process may hold it): a measure that
  // cannot be charged now is charged with the next.
  if (unapplied_ != Measured::kNothing && bypass_until_ns_.load(std::memory_order_relaxed) <= now &&
      TryLock()) {
    if (seg_->slots[slot_].key.load(std::memory_order_relaxed) == key_) {
      ChargeMeasured(unapplied_ == Measured::kTime ? std::optional<uint64_t>(unapplied_ns_)
                                                   : std::nullopt);
    }
    Unlock();
    unapplied_ = Measured::kNothing;
    unapplied_ns_ = 0;
  }
  has_unapplied_.store(unapplied_ != Measured::kNothing, std::memory_order_relaxed);
  pthread_mutex_unlock(&measure_lock_);
}

void ComputeArbiter::HandOver(uint64_t now, uint64_t start) {
  // A waiting workload that was not heard from lately (its waiters stopped, or it was idle) banks
  // no credit: it competes from the least virtual time of those that were.
  uint64_t least_recent = UINT64_MAX;
  for (int s = 0; s < kArbiterSlots; ++s) {
    const ArbiterSlot& slot = seg_->slots[s];
    if (slot.key.load(std::memory_order_relaxed) != 0 &&
        Age(now, slot.busy_at_ns.load(std::memory_order_relaxed)) < kIdleNs) {
      least_recent = std::min(least_recent, slot.vtime.load(std::memory_order_relaxed));
    }
  }
  // Workloads that missed a turn lately are passed over, unless nobody else waits: better a turn
  // that may be missed again than an idle GPU.
  int best = -1;
  uint64_t best_vtime = 0;
  for (int pass = 0; pass < 2 && best < 0; ++pass) {
    for (int s = 0; s < kArbiterSlots; ++s) {
      ArbiterSlot& slot = seg_->slots[s];
      if (slot.key.load(std::memory_order_relaxed) == 0 ||
          slot.waiting.load(std::memory_order_relaxed) == 0 ||
          (pass == 0 && Age(now, slot.missed_at_ns.load(std::memory_order_relaxed)) < kMissedNs) ||
          !Eligible(s, now)) {
        continue;
      }
      uint64_t v = slot.vtime.load(std::memory_order_relaxed);
      if (least_recent != UINT64_MAX && v < least_recent &&
          Age(now, slot.busy_at_ns.load(std::memory_order_relaxed)) >= kIdleNs) {
        v = least_recent;
        slot.vtime.store(v, std::memory_order_relaxed);
      }
      if (best < 0 || v < best_vtime) {
        best = s;
        best_vtime = v;
      }
    }
  }
  seg_->draining.store(0, std::memory_order_relaxed);
  seg_->queued_until_ns.store(0, std::memory_order_relaxed);
  start = std::max(start, now);
  if (best < 0) {
    seg_->holder.store(0, std::memory_order_relaxed);
  } else {
    ArbiterSlot& slot = seg_->slots[best];
    // The holder must watch the clock (and bound its work in flight) while another workload
    // waits or was busy lately (it is about to ask again), or when it has a limit. Its turn is
    // shorter than turn_ns in proportion to its request against the heaviest of those others':
    // every turn then moves virtual time alike, so turns alternate, and a light workload never
    // waits through several turns of a heavy one.
    const uint32_t weight = std::max<uint32_t>(slot.weight.load(std::memory_order_relaxed), 1);
    uint32_t heaviest = weight;
    bool others = slot.limit.load(std::memory_order_relaxed) < 1000;
    for (int s = 0; s < kArbiterSlots; ++s) {
      const ArbiterSlot& other = seg_->slots[s];
      if (s != best && other.key.load(std::memory_order_relaxed) != 0 &&
          (other.waiting.load(std::memory_order_relaxed) != 0 ||
           Age(now, other.busy_at_ns.load(std::memory_order_relaxed)) < kIdleNs)) {
        others = true;
        heaviest = std::max(heaviest, other.weight.load(std::memory_order_relaxed));
      }
    }
    uint64_t turn = std::max(seg_->turn_ns / kShortestTurnDivisor,
                             seg_->turn_ns * weight / std::max(heaviest, weight));
    const int64_t tokens = slot.tokens_ns.load(std::memory_order_relaxed);
    if (slot.limit.load(std::memory_order_relaxed) < 1000 && tokens < static_cast<int64_t>(turn)) {
      turn = static_cast<uint64_t>(tokens);
    }
    seg_->turn_start_ns.store(start, std::memory_order_relaxed);
    seg_->deadline_ns.store(start + turn, std::memory_order_relaxed);
    seg_->check.store(others ? 1 : 0, std::memory_order_relaxed);
    seg_->holder.store((static_cast<uint64_t>(best) + 1) << 32, std::memory_order_release);
  }
  seg_->seq.fetch_add(1, std::memory_order_release);
  FutexWakeAll(&seg_->seq);
}

void ComputeArbiter::Account(uint64_t began, uint64_t now, bool holding) {
  pthread_mutex_lock(&account_lock_);
  if (acquired_at_ns_ != 0) {
    window_held_ns_ += Age(began, acquired_at_ns_);
    acquired_at_ns_ = 0;
  }
  window_waited_ns_ += Age(now, began);
  if (holding) acquired_at_ns_ = now;
  if (window_start_ns_ == 0) window_start_ns_ = began;
  bool starved = false;
  const uint64_t window = Age(now, window_start_ns_);
  if (window >= kStarveWindowNs) {
    starved = window_waited_ns_ > window / 2 && window_held_ns_ < window / 1000 * weight_ / 4;
    window_start_ns_ = now;
    window_waited_ns_ = window_held_ns_ = 0;
  }
  pthread_mutex_unlock(&account_lock_);
  if (starved) Bypass(now, "this process held the GPU far less than its share while waiting");
}

void ComputeArbiter::Bypass(uint64_t now, const char* why) {
  if (bypass_until_ns_.exchange(now + kBypassNs, std::memory_order_relaxed) < now) {
    fprintf(stderr,
            "gpufrac: %s; this process stops taking turns on the GPU for %d s (its time is the "
            "GPU's equal split meanwhile)\n",
            why, static_cast<int>(kBypassNs / 1'000'000'000));
  }
}

ComputeArbiter::Gate ComputeArbiter::CheckSlow(uint64_t holder) {
  if (bypass_until_ns_.load(std::memory_order_relaxed) > MonotonicNs()) return Gate::kGo;
  if (Taken(holder)) {
    const uint64_t now = MonotonicNs();
    if (now < seg_->deadline_ns.load(std::memory_order_relaxed)) return Gate::kGo;
    if (limited_ || seg_->check.load(std::memory_order_relaxed) != 0) {
      drain_seq_.store(seg_->seq.load(std::memory_order_acquire), std::memory_order_relaxed);
      return Gate::kDrainThenRelease;
    }
    // Alone and unlimited: the turn is renewed without draining.
    if (!Lock()) return Gate::kGo;
    if (Taken(seg_->holder.load(std::memory_order_relaxed)) &&
        MonotonicNs() >= seg_->deadline_ns.load(std::memory_order_relaxed)) {
      const uint64_t now = MonotonicNs();
      Charge(slot_, now - seg_->turn_start_ns.load(std::memory_order_relaxed));
      seg_->turn_start_ns.store(now, std::memory_order_relaxed);
      seg_->deadline_ns.store(now + seg_->turn_ns, std::memory_order_relaxed);
    }
    Unlock();
    return Gate::kGo;
  }
  // Handed to this workload: any of its processes takes it.
  if (Claim(holder)) return Gate::kGo;
  return Gate::kAcquire;
}

bool ComputeArbiter::Claim(uint64_t holder) {
  if (SlotOf(holder) != slot_ || PidOf(holder) != 0) return false;
  return seg_->holder.compare_exchange_strong(holder, token_, std::memory_order_acquire);
}

bool ComputeArbiter::Release(uint64_t work_end_ns) {
  Measure();
  if (!Lock()) {
    // Cannot take the lock: give the turn up anyway, uncharged, so that nobody waits on it.
    uint64_t mine = seg_->holder.load(std::memory_order_relaxed);
    if (Taken(mine)) seg_->holder.compare_exchange_strong(mine, 0, std::memory_order_release);
    seg_->seq.fetch_add(1, std::memory_order_release);
    FutexWakeAll(&seg_->seq);
    return false;
  }
  // Taken from it while it drained: whoever took it charged it up to then.
  bool kept = false;
  const uint64_t now = MonotonicNs();
  // (Read, not taken: two of its threads may have found the turn over; the second to come here
  // finds the turn the first began, and keeps it.)
  const uint64_t seen = drain_seq_.load(std::memory_order_relaxed);
  if (Taken(seg_->holder.load(std::memory_order_relaxed)) && seen != kNoSeq &&
      seen != seg_->seq.load(std::memory_order_relaxed)) {
    kept = true;  // Another of its processes handed the turn on while it drained, and got it back.
  } else if (Taken(seg_->holder.load(std::memory_order_relaxed))) {
    // Its workload's other processes may have work queued past its own.
    const uint64_t end = std::max(
        {now, work_end_ns, seg_->queued_until_ns.load(std::memory_order_relaxed)});
    Charge(slot_, end - seg_->turn_start_ns.load(std::memory_order_relaxed));
    // It wants the GPU again at once, so it competes for the next turn like the waiters: its
    // workload keeps the GPU while its virtual time is still the least.
    ArbiterSlot& mine = seg_->slots[slot_];
    mine.waiting.fetch_add(1, std::memory_order_relaxed);
    HandOver(now, end);
    kept = Claim(seg_->holder.load(std::memory_order_relaxed));
    mine.waiting.fetch_sub(1, std::memory_order_relaxed);
  }
  Unlock();
  return kept;
}

void ComputeArbiter::PassFromHolder(uint64_t holder, uint64_t now) {
  const uint64_t start = seg_->turn_start_ns.load(std::memory_order_relaxed);
  const uint64_t deadline = seg_->deadline_ns.load(std::memory_order_relaxed);
  const uint64_t queued = seg_->queued_until_ns.load(std::memory_order_relaxed);
  const uint64_t active = seg_->active_ns.load(std::memory_order_relaxed);
  // A holder that went quiet within its turn: the work it published ran out kStealSlackNs ago and
  // it has neither launched nor stopped waiting since. It is idle, not about to queue more (as a
  // holder at the end of its turn is): the rest of its turn goes to the others, and it is charged
  // up to the end of its work. If it comes back, it waits like anyone else.
  if (now < deadline && queued != 0 && now >= std::max(queued, active) + kStealSlackNs) {
    Charge(SlotOf(holder), Age(queued, start));
    HandOver(now, queued);
    return;
  }
  // (bogus: a turn no hand-over gives; the segment was written by someone else.)
  const bool bogus = Age(deadline, start) > 4 * seg_->turn_ns + kDrainGraceNs;
  if (now < deadline && !bogus) return;
  const pid_t pid = PidOf(holder);
  const uint32_t drain_state = seg_->draining.load(std::memory_order_relaxed);
  const bool draining = drain_state != 0;
  const bool gone = kill(pid, 0) != 0 && errno == ESRCH;
  const uint64_t last_active = std::max(deadline, active);
  // When the holder's queued work will be done is known: the turn passes as that work runs out,
  // whatever the holder's thread is doing (waiting for it, or not run by the CPU).
  const bool stopped = queued != 0 ? queued <= now + kHandOverNs
                                   : !draining && Age(now, last_active) >= kStealSlackNs;
  if (!bogus && !stopped && !gone && now < deadline + DrainGraceNs(drain_state)) return;
  // Its turn is over and it is not finishing it: its work ends, it stopped queueing work, died or
  // hung. It is charged for as long as it was using the GPU, and the next turn starts when its
  // work ends.
  uint64_t used_until = draining || gone ? now : std::min(now, last_active);
  // A live holder whose work runs out is still using the GPU (it waits for that work, or its
  // thread is about to queue more): it competes for the next turn as if it waited, and keeps the
  // GPU while its workload is the most owed.
  const bool live = !gone && !bogus && queued != 0;
  if (live) used_until = std::min(queued, now + kHandOverNs);
  Charge(SlotOf(holder), Age(used_until, start));
  ArbiterSlot& held = seg_->slots[SlotOf(holder) % kArbiterSlots];
  if (live) held.waiting.fetch_add(1, std::memory_order_relaxed);
  HandOver(now, used_until);
  if (!live) return;
  held.waiting.fetch_sub(1, std::memory_order_relaxed);
  // Given back to it, the turn is its process's again; one that was draining may still be
  // finishing that drain (its thread not run yet, on a busy CPU), but the work it drained ran
  // out: it keeps the new turn a short grace past its end, not a drain's (a holder that does not
  // come back to launch, stopped or frozen, would otherwise keep the others waiting 250 ms).
  uint64_t handed = seg_->holder.load(std::memory_order_relaxed);
  if (SlotOf(handed) == SlotOf(holder) && PidOf(handed) == 0 &&
      seg_->holder.compare_exchange_strong(handed, holder, std::memory_order_relaxed)) {
    seg_->draining.store(draining ? kDrainGivenBack : 0, std::memory_order_relaxed);
  }
}

void ComputeArbiter::BeginTurn(uint64_t now) {
  const uint64_t start = seg_->turn_start_ns.load(std::memory_order_relaxed);
  if (now <= start) return;
  seg_->deadline_ns.store(seg_->deadline_ns.load(std::memory_order_relaxed) + (now - start),
                          std::memory_order_relaxed);
  seg_->turn_start_ns.store(now, std::memory_order_relaxed);
}

bool ComputeArbiter::Rejoin() {
  if (seg_->slots[slot_].key.load(std::memory_order_relaxed) == key_) return true;
  if (!Lock()) {
    Bypass(MonotonicNs(), "the GPU's compute arbiter stays locked");
    return false;
  }
  const bool joined = JoinLocked(MonotonicNs());
  Unlock();
  if (!joined) Bypass(MonotonicNs(), "the GPU's compute arbiter has no free slot");
  return joined;
}

void ComputeArbiter::ComeBackFromIdle(uint64_t holder, uint64_t now) {
  // The holder is charged up to now, so that its time alone counts before this workload's
  // virtual time is compared with it; and an idle workload banks no credit: it starts at the
  // least virtual time of those using the GPU.
  // (Up to the end of its published work, if that was earlier: it was idle since.)
  const uint64_t start = seg_->turn_start_ns.load(std::memory_order_relaxed);
  if (holder != 0 && PidOf(holder) != 0 && now > start) {
    const uint64_t queued = seg_->queued_until_ns.load(std::memory_order_relaxed);
    Charge(SlotOf(holder), (queued > start && queued < now ? queued : now) - start);
    seg_->turn_start_ns.store(now, std::memory_order_relaxed);
  }
  uint64_t least = UINT64_MAX;
  for (int s = 0; s < kArbiterSlots; ++s) {
    const ArbiterSlot& other = seg_->slots[s];
    const bool active = s == SlotOf(holder) || (s != slot_ && other.waiting.load() != 0);
    if (other.key.load(std::memory_order_relaxed) != 0 && active) {
      const uint64_t v = other.vtime.load(std::memory_order_relaxed);
      if (v < least) least = v;
    }
  }
  ArbiterSlot& mine = seg_->slots[slot_];
  if (least != UINT64_MAX && mine.vtime.load(std::memory_order_relaxed) < least) {
    mine.vtime.store(least, std::memory_order_relaxed);
  }
}

void ComputeArbiter::MoveTurnOn(uint64_t holder, uint64_t now) {
  const uint64_t start = seg_->turn_start_ns.load(std::memory_order_relaxed);
  if (holder == 0) {
    HandOver(now);
  } else if (PidOf(holder) == 0 && Age(now, start) >= kClaimNs) {
    // Handed to a workload whose waiters did not come for it.
    seg_->slots[SlotOf(holder)].missed_at_ns.store(now, std::memory_order_relaxed);
    HandOver(now);
  } else if (PidOf(holder) != 0) {
    PassFromHolder(holder, now);
  }
}

uint64_t ComputeArbiter::SleepNs(uint64_t holder, uint64_t now) const {
  // Until the turn may change hands: its end (plus the grace while it drains), or when this
  // workload's bucket is deep enough again; a hand-over wakes it sooner.
  uint64_t sleep = kMaxSleepNs;
  if (holder != 0) {
    uint64_t until = seg_->deadline_ns.load(std::memory_order_relaxed);
    if (PidOf(holder) == 0) {
      until = seg_->turn_start_ns.load(std::memory_order_relaxed) + kClaimNs;
    } else if (const uint64_t queued = seg_->queued_until_ns.load(std::memory_order_relaxed);
               queued != 0) {
      // Until the holder's work is about to end (at most the grace past its turn), or, within
      // its turn, until it would have been quiet for kStealSlackNs.
      const uint64_t ends = queued > kHandOverNs ? queued - kHandOverNs : 0;
      const uint64_t quiet =
          std::max(queued, seg_->active_ns.load(std::memory_order_relaxed)) + kStealSlackNs;
      until = std::min({std::max(until, ends), until + kDrainGraceNs, quiet});
    } else if (const uint32_t drain_state = seg_->draining.load(std::memory_order_relaxed);
               drain_state != 0) {
      until += DrainGraceNs(drain_state);
    }
    if (until > now && until - now < sleep) sleep = until - now;
    if (until <= now) sleep = kStealSlackNs / 2;
  } else if (limited_) {
    const ArbiterSlot& mine = seg_->slots[slot_];
    const int64_t missing =
        static_cast<int64_t>(seg_->turn_ns / 4) - mine.tokens_ns.load(std::memory_order_relaxed);
    const uint32_t limit = mine.limit.load(std::memory_order_relaxed);
    if (missing > 0 && limit > 0) {
      const uint64_t refill = static_cast<uint64_t>(missing) * 1000 / limit + 1;
      if (refill < sleep) sleep = refill;
    }
  }
  return sleep;
}

bool ComputeArbiter::Acquire() {
  // Its slot was given to another workload while it was idle for kStaleNs: it joins again.
  if (!Rejoin()) return false;
  ArbiterSlot& mine = seg_->slots[slot_];
  // When it was last busy, before waiting refreshes it: whether it comes back from idleness.
  const uint64_t last_busy = mine.busy_at_ns.load(std::memory_order_relaxed);
  mine.waiting.fetch_add(1, std::memory_order_relaxed);
  seg_->check.store(1, std::memory_order_relaxed);
  bool first = true;
  bool holding = false;
  const uint64_t began = MonotonicNs();
  for (;;) {
    Measure();
    if (!Lock()) {
      // Degraded: go without turns rather than wait on a stuck process.
      Bypass(MonotonicNs(), "the GPU's compute arbiter stays locked");
      break;
    }
    if (Age(MonotonicNs(), began) >= kMaxWaitNs) {
      Unlock();
      Bypass(MonotonicNs(), "no turn on the GPU came within 2 s");
      break;
    }
    const uint64_t now = MonotonicNs();
    mine.busy_at_ns.store(now, std::memory_order_relaxed);  // alive and waiting
    // A waiter that runs is not stopped or dead: a turn it was too slow to take (a busy CPU)
    // does not keep its workload passed over.
    mine.missed_at_ns.store(0, std::memory_order_relaxed);
    uint64_t holder = seg_->holder.load(std::memory_order_relaxed);
    // Busy lately (it just had a turn), it keeps its virtual time; else it comes back from idle.
    if (first &&
        (Age(now, last_busy) >= kIdleNs || mine.used_ns.load(std::memory_order_relaxed) == 0)) {
      ComeBackFromIdle(holder, now);
    }
    first = false;
    if (Taken(holder) || Claim(holder)) {
      if (!Taken(holder)) BeginTurn(now);
      holding = true;
      Unlock();
      break;
    }
    MoveTurnOn(holder, now);
    holder = seg_->holder.load(std::memory_order_relaxed);
    if (Claim(holder)) {
      BeginTurn(now);
      holding = true;
      Unlock();
      break;
    }
    const uint64_t sleep = SleepNs(holder, now);
    const uint32_t seen = seg_->seq.load(std::memory_order_acquire);
    Unlock();
    FutexWait(&seg_->seq, seen, sleep);
  }
  const uint64_t end = MonotonicNs();
  mine.busy_at_ns.store(end, std::memory_order_relaxed);
  mine.waiting.fetch_sub(1, std::memory_order_relaxed);
  Account(began, end, holding);
  return holding;
}

void ComputeArbiter::Touch() {
  if (Holding()) seg_->active_ns.store(MonotonicNs(), std::memory_order_relaxed);
}

void ComputeArbiter::Queued(uint64_t until_ns) {
  if (!Holding()) return;
  // The latest end of its workload's processes: raised by any of them, lowered only by the one
  // that published it (its work turned out to end sooner).
  const uint64_t mine = published_ns_.exchange(until_ns, std::memory_order_relaxed);
  uint64_t until = seg_->queued_until_ns.load(std::memory_order_relaxed);
  while ((until < until_ns || (until == mine && until != until_ns)) &&
         !seg_->queued_until_ns.compare_exchange_weak(until, until_ns,
                                                      std::memory_order_relaxed)) {
  }
}

uint64_t ComputeArbiter::UsedNs() const {
  return seg_ ? seg_->slots[slot_].used_ns.load(std::memory_order_relaxed) : 0;
}

}  // namespace gpufrac::limiter
