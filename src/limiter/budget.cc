// The lock-free shared budget (see budget.h for the protocol and its invariants).
#include "limiter/budget.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstring>

#include "limiter/file_stat.h"
#include "limiter/limit_config.h"

namespace gpufrac::limiter {
namespace {

constexpr uint64_t kMagic = 0x6770756672616331ull;  // "gpufrac1"
constexpr uint32_t kVersion = 5;

// Value fields: signed 40 bits. Lanes: 10 bits. A lane's records carry a 24-bit sequence number;
// the tag in `global` has room for its low 13 bits, which is enough to tell the tagged operation
// from its lane's previous one, while the full 24 bits make a stalled helper's compare-and-swap
// fail unless 16 million operations went by meanwhile. The tag's "committed" bit is set by the
// operation's owner once it has folded itself into its lane, so that the next operation, in any
// process, can skip the look at that lane (another process's cache line) in the common case.
constexpr int kValueBits = 40;
constexpr uint64_t kValueMask = (uint64_t{1} << kValueBits) - 1;
constexpr uint32_t kSeqMask = (1u << 24) - 1;
constexpr uint32_t kTagSeqMask = (1u << 13) - 1;
constexpr int kLaneShift = 40;
constexpr uint64_t kCommittedBit = uint64_t{1} << 50;
constexpr int kGlobalSeqShift = 51;
constexpr int kRecordSeqShift = 40;
static_assert(kBudgetLanes == 1024, "the tag holds a 10-bit lane number");

int64_t Value(uint64_t word) {
  return static_cast<int64_t>(word << (64 - kValueBits)) >> (64 - kValueBits);
}
uint32_t RecordSeq(uint64_t word) {
  return static_cast<uint32_t>(word >> kRecordSeqShift) & kSeqMask;
}
uint64_t Record(int64_t value, uint32_t seq) {
  return (static_cast<uint64_t>(value) & kValueMask) |
         (static_cast<uint64_t>(seq & kSeqMask) << kRecordSeqShift);
}
int TagLane(uint64_t global) { return static_cast<int>((global >> kLaneShift) & 1023); }
uint32_t TagSeq(uint64_t global) {
  return static_cast<uint32_t>(global >> kGlobalSeqShift) & kTagSeqMask;
}
uint64_t Global(int64_t used, int lane, uint32_t seq) {
  return (static_cast<uint64_t>(used) & kValueMask) | (static_cast<uint64_t>(lane) << kLaneShift) |
         (static_cast<uint64_t>(seq & kTagSeqMask) << kGlobalSeqShift);
}

// Lane spare word: bytes (40 bits) | holder (11 bits) | committed sequence when last given up (13
// bits).
constexpr uint32_t kSpareReclaimer = 2047;
constexpr int kHolderShift = 40;
constexpr int kHeldSeqShift = 51;
uint64_t SpareBytes(uint64_t word) { return word & kValueMask; }
uint32_t HolderOf(uint64_t word) { return static_cast<uint32_t>(word >> kHolderShift) & 2047; }
uint32_t HeldSeq(uint64_t word) {
  return static_cast<uint32_t>(word >> kHeldSeqShift) & kTagSeqMask;
}
uint64_t SpareWord(uint64_t bytes, uint32_t holder, uint32_t seq) {
  return (bytes & kValueMask) | static_cast<uint64_t>(holder) << kHolderShift |
         static_cast<uint64_t>(seq & kTagSeqMask) << kHeldSeqShift;
}

// Waiting for another thread to finish with a lane: spin briefly, then give up the CPU (the
// holder may be waiting for it: 8 processes on 2 cores are common).
void Relax(uint32_t spin) {
  if (spin < 64) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  } else {
    sched_yield();
  }
}

// Lane owner word: state (2 bits) | pid (22 bits) | start ticks (40 bits).
enum LaneState : uint64_t { kFree = 0, kActive = 1, kIdle = 2, kReaping = 3 };
uint64_t Owner(LaneState state, const ProcessId& id) {
  return state | (static_cast<uint64_t>(id.pid) & 0x3fffff) << 2 |
         (id.start_ticks & kValueMask) << 24;
}
LaneState StateOf(uint64_t owner) { return static_cast<LaneState>(owner & 3); }
ProcessId IdentityOf(uint64_t owner) {
  return ProcessId{static_cast<pid_t>((owner >> 2) & 0x3fffff), owner >> 24};
}
bool SameProcess(uint64_t owner, const ProcessId& id) {
  return (owner & ~uint64_t{3}) == (Owner(kFree, id) & ~uint64_t{3});
}

// The kernel sets this bit in a robust futex word when its owner dies (linux/futex.h).
constexpr int kFutexOwnerDied = 0x40000000;
int FutexWord(const pthread_mutex_t* m) {
  // glibc keeps the futex word first in pthread_mutex_t on every Linux ABI.
  return __atomic_load_n(reinterpret_cast<const int*>(m), __ATOMIC_ACQUIRE);
}

// Milliseconds on the coarse monotonic clock: read from the vDSO, no system call.
uint64_t NowMs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000 + static_cast<uint64_t>(ts.tv_nsec) / 1000000 + 1;
}
constexpr uint64_t kRecheckMs = 100;

void SleepBriefly() {
  struct timespec ts = {0, 1000000};
  nanosleep(&ts, nullptr);
}

// POSIX shared memory without shm_open/shm_unlink, which live in librt before glibc 2.34 (a library
// the limiter does not link, see glibc_symbols.h). glibc's shm_open is open(2) of the name, less
// its leading slashes, under /dev/shm with O_NOFOLLOW and O_CLOEXEC; doing the same here keeps the
// segments where launchers, the node service and tests find them with shm_open.
bool SharedMemoryPath(const char* name, char* path, size_t len) {
  while (*name == '/') ++name;
  if (*name == '\0' || strchr(name, '/') != nullptr) {
    errno = EINVAL;
    return false;
  }
  int n = snprintf(path, len, "/dev/shm/%s", name);
  if (n < 0 || static_cast<size_t>(n) >= len) {
    errno = ENAMETOOLONG;
    return false;
  }
  return true;
}

constexpr size_t kSharedMemoryPathMax = sizeof("/dev/shm/") + 255;  // NAME_MAX
// A budget directory (limit_config.h) and a name in it.
constexpr size_t kMaxBudgetPathLen = kMaxBudgetDirLen + 1 + 255 + 1;

int OpenSharedMemory(const char* name, int flags, mode_t mode) {
  char path[kSharedMemoryPathMax];
  if (!SharedMemoryPath(name, path, sizeof(path))) return -1;
  return open(path, flags | O_NOFOLLOW | O_CLOEXEC, mode);
}

int UnlinkSharedMemory(const char* name) {
  char path[kSharedMemoryPathMax];
  if (!SharedMemoryPath(name, path, sizeof(path))) return -1;
  return unlink(path);
}

}  // namespace

// Remembers the liveness of the processes met during one reclaim pass, so that a process with
// many lanes costs one /proc read.
class LivenessCache {
 public:
  bool Alive(const ProcessId& id) {
    for (int i = 0; i < n_; ++i) {
      if (ids_[i].pid == id.pid && ids_[i].start_ticks == id.start_ticks) return alive_[i];
    }
    bool alive = proc::MayBeAlive(id);
    if (n_ < kSize) {
      ids_[n_] = id;
      alive_[n_++] = alive;
    }
    return alive;
  }

 private:
  static constexpr int kSize = 32;
  ProcessId ids_[kSize];
  bool alive_[kSize];
  int n_ = 0;
};

void Budget::Close() {
  if (seg_) munmap(seg_, sizeof(BudgetSegment));
  seg_ = nullptr;
}

bool Budget::Map(int fd, char* err, size_t err_len) {
  void* p = mmap(nullptr, sizeof(BudgetSegment), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    snprintf(err, err_len, "cannot map budget segment: %s", strerror(errno));
    return false;
  }
  seg_ = static_cast<BudgetSegment*>(p);
  return true;
}

bool Budget::Initialise(int fd, const char* name, uint64_t limit, uint64_t context_bytes,
                        char* err, size_t err_len) {
  if (ftruncate(fd, sizeof(BudgetSegment)) != 0) {
    snprintf(err, err_len, "cannot size budget segment %s: %s", name, strerror(errno));
    return false;
  }
  // The pages are taken now: on a full tmpfs, writing them through the mapping would raise
  // SIGBUS (killing a root service that makes budgets) where this gives ENOSPC.
  if (int e = posix_fallocate(fd, 0, sizeof(BudgetSegment)); e != 0) {
    snprintf(err, err_len, "cannot allocate budget segment %s: %s", name, strerror(e));
    return false;
  }
  if (!Map(fd, err, err_len)) return false;
  // The file starts zeroed: every lane free, nothing in use, the tag naming lane 0's sequence 0,
  // which counts as committed.
  seg_->magic = kMagic;
  seg_->version = kVersion;
  seg_->limit = limit;
  seg_->context_bytes = context_bytes;
  seg_->pid_namespace = PidNamespace();
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  for (auto& m : seg_->member_alive) pthread_mutex_init(&m, &attr);
  pthread_mutex_init(&seg_->reclaim_lock, &attr);
  pthread_mutexattr_destroy(&attr);
  seg_->ready.store(1, std::memory_order_release);
  return true;
}

static bool LimitInRange(uint64_t limit, char* err, size_t err_len) {
  if (limit != 0 && limit <= kMaxBudgetBytes) return true;
  snprintf(err, err_len, "budget limit must be between 1 byte and 512 GiB");
  return false;
}

bool Budget::Open(const char* name, uint64_t limit, uint64_t context_bytes, char* err,
                  size_t err_len) {
  if (!LimitInRange(limit, err, err_len)) return false;
  int fd = OpenSharedMemory(name, O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) {
    if (errno == EEXIST) return Attach(name, err, err_len);
    snprintf(err, err_len, "cannot create budget segment %s: %s", name, strerror(errno));
    return false;
  }
  bool made = Initialise(fd, name, limit, context_bytes, err, err_len);
  close(fd);
  if (!made) {
    Close();
    UnlinkSharedMemory(name);
  }
  return made;
}

bool Budget::CreateAt(int dir_fd, const char* name, uint64_t limit, uint64_t context_bytes,
                      int uid, int gid, char* err, size_t err_len) {
  if (!LimitInRange(limit, err, err_len)) return false;
  int fd = openat(dir_fd, name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    snprintf(err, err_len, "cannot create budget segment %s: %s", name, strerror(errno));
    return false;
  }
  // Made whole while it is still root's: once the user owns it, the user could truncate it under
  // a mapping this process writes through (SIGBUS).
  Budget budget;
  bool made = budget.Initialise(fd, name, limit, context_bytes, err, err_len);
  budget.Close();
  if (made && uid >= 0 && fchown(fd, static_cast<uid_t>(uid), static_cast<gid_t>(gid)) != 0) {
    snprintf(err, err_len, "cannot hand budget segment %s to uid %d: %s", name, uid,
             strerror(errno));
    made = false;
  }
  close(fd);
  if (!made) unlinkat(dir_fd, name, 0);
  return made;
}

bool Budget::AttachIn(const char* dir, const char* name, char* err, size_t err_len) {
  int fd = -1;
  if (dir == nullptr) {
    fd = OpenSharedMemory(name, O_RDWR | O_NONBLOCK, 0);
  } else {
    char path[kMaxBudgetPathLen];
    int n = snprintf(path, sizeof(path), "%s/%s", dir, name);
    if (n < 0 || static_cast<size_t>(n) >= sizeof(path)) {
      errno = ENAMETOOLONG;
    } else {
      fd = open(path, O_RDWR | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
    }
  }
  if (fd < 0) {
    snprintf(err, err_len, "cannot open budget segment %s: %s", name, strerror(errno));
    return false;
  }
  return AttachFd(fd, name, err, err_len);
}

bool Budget::AttachFd(int fd, const char* name, char* err, size_t err_len) {
  // The creator may still be sizing and initialising it.
  for (int tries = 0;; ++tries) {
    struct stat st;
    if (StatFd(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      close(fd);
      snprintf(err, err_len, "budget segment %s is not a regular file", name);
      return false;
    }
    if (static_cast<size_t>(st.st_size) == sizeof(BudgetSegment)) break;
    if (tries == 2000) {
      close(fd);
      snprintf(err, err_len, "budget segment %s has the wrong size (another gpufrac version?)",
               name);
      return false;
    }
    SleepBriefly();
  }
  bool mapped = Map(fd, err, err_len);
  close(fd);
  if (!mapped) return false;
  for (int tries = 0; seg_->ready.load(std::memory_order_acquire) != 1; ++tries) {
    if (tries == 2000) break;
    SleepBriefly();
  }
  if (seg_->ready.load(std::memory_order_acquire) != 1 || seg_->magic != kMagic ||
      seg_->version != kVersion) {
    snprintf(err, err_len, "budget segment %s is not a gpufrac v%u budget", name, kVersion);
    Close();
    return false;
  }
  // Liveness is judged by PID, so all members must see the same PIDs.
  if (seg_->pid_namespace != PidNamespace()) {
    snprintf(err, err_len,
             "budget %s belongs to processes in another PID namespace; the processes of one "
             "workload must share a PID namespace (e.g. shareProcessNamespace in a pod)",
             name);
    Close();
    return false;
  }
  return true;
}

bool Budget::Unlink(const char* name) { return UnlinkSharedMemory(name) == 0; }

uint64_t Budget::used() const {
  int64_t v = Value(seg_->global.load(std::memory_order_acquire));
  return v > 0 ? static_cast<uint64_t>(v) : 0;
}

bool Budget::UnlinkAt(int dir_fd, const char* name) { return unlinkat(dir_fd, name, 0) == 0; }

bool Budget::PeekUsedAt(int dir_fd, const char* name, uint64_t* used) {
  int fd = openat(dir_fd, name, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st;
  uint64_t magic = 0, global = 0;
  bool ok = StatFd(fd, &st) == 0 && S_ISREG(st.st_mode) &&
            static_cast<size_t>(st.st_size) == sizeof(BudgetSegment) &&
            pread(fd, &magic, sizeof(magic), offsetof(BudgetSegment, magic)) == sizeof(magic) &&
            magic == kMagic &&
            pread(fd, &global, sizeof(global), offsetof(BudgetSegment, global)) == sizeof(global);
  close(fd);
  if (!ok) return false;
  int64_t v = Value(global);
  *used = v > 0 ? static_cast<uint64_t>(v) : 0;
  return true;
}

int64_t Budget::HeldBy(const ProcessId& id) const {
  int64_t held = 0;
  uint32_t hwm = seg_->lane_high_water.load(std::memory_order_acquire);
  for (uint32_t i = 0; i < hwm; ++i) {
    uint64_t owner = seg_->lanes[i].owner.load(std::memory_order_acquire);
    if (StateOf(owner) != kFree && SameProcess(owner, id)) {
      held += Value(seg_->lanes[i].committed.load(std::memory_order_acquire)) -
              static_cast<int64_t>(SpareOf(static_cast<int>(i)));
    }
  }
  return held;
}

uint64_t Budget::SpareOf(int lane) const {
  return SpareBytes(seg_->lanes[lane].spare.load(std::memory_order_acquire));
}

// Finishes the commit of the operation that `global_word` names, if its lane has not yet.
void Budget::HelpCommit(uint64_t global_word) {
  if (global_word & kCommittedBit) return;
  BudgetLane& lane = seg_->lanes[TagLane(global_word)];
  uint32_t seq = TagSeq(global_word);
  uint64_t committed = lane.committed.load(std::memory_order_acquire);
  if ((RecordSeq(committed) & kTagSeqMask) == seq) return;
  uint64_t pending = lane.pending.load(std::memory_order_acquire);
  // Only while the operation is still the newest in `global` are these two reads about it: that
  // rules out a lane that has since moved on (and wrapped its sequence numbers).
  if ((RecordSeq(pending) & kTagSeqMask) != seq ||
      seg_->global.load(std::memory_order_acquire) != global_word) {
    return;
  }
  uint64_t done = Record(Value(committed) + Value(pending), RecordSeq(pending));
  lane.committed.compare_exchange_strong(committed, done, std::memory_order_acq_rel);
}

bool Budget::Apply(int lane_index, int64_t delta, bool check_limit) {
  BudgetLane& lane = seg_->lanes[lane_index];
  // Only this lane's own operations (or helpers finishing them) change `committed`.
  const uint64_t before = lane.committed.load(std::memory_order_acquire);
  const uint32_t seq = (RecordSeq(before) + 1) & kSeqMask;
  lane.pending.store(Record(delta, seq), std::memory_order_release);
  const int64_t limit = static_cast<int64_t>(seg_->limit);
  uint64_t global = seg_->global.load(std::memory_order_acquire);
  uint64_t ours;
  do {
    // Our own previous operation is committed already: only others' need looking at.
    if (TagLane(global) != lane_index) HelpCommit(global);
    int64_t used = Value(global);
    if (check_limit && delta > 0 && used + delta > limit) return false;
    ours = Global(used + delta, lane_index, seq);
  } while (!seg_->global.compare_exchange_weak(global, ours, std::memory_order_acq_rel,
                                               std::memory_order_acquire));
  // Fold the operation into the lane; if this fails, a helper already did exactly that.
  uint64_t expected = before;
  lane.committed.compare_exchange_strong(expected, Record(Value(before) + delta, seq),
                                         std::memory_order_acq_rel);
  // Say so in `global`, unless another operation has replaced ours there already.
  seg_->global.compare_exchange_strong(ours, ours | kCommittedBit, std::memory_order_release,
                                       std::memory_order_relaxed);
  return true;
}

uint64_t Budget::SpareCap() const {
  uint64_t cap = seg_->limit / 64;
  return cap < kSpareMax ? cap : kSpareMax;
}

// The owner's fast paths: one compare-and-swap on its own lane, unless someone holds the word.
bool Budget::TakeSpare(int lane, uint64_t bytes) {
  std::atomic<uint64_t>& word = seg_->lanes[lane].spare;
  uint64_t s = word.load(std::memory_order_relaxed);
  return HolderOf(s) == 0 && SpareBytes(s) >= bytes &&
         word.compare_exchange_strong(s, s - bytes, std::memory_order_acq_rel);
}

bool Budget::GiveSpare(int lane, uint64_t bytes) {
  std::atomic<uint64_t>& word = seg_->lanes[lane].spare;
  uint64_t s = word.load(std::memory_order_relaxed);
  return HolderOf(s) == 0 && bytes <= SpareCap() - SpareBytes(s) &&
         word.compare_exchange_strong(s, s + bytes, std::memory_order_acq_rel);
}

// A holder other than a reclaimer is gone once its lane has been claimed or freed by a reclaimer,
// or its process has ended.
bool Budget::HolderGone(uint32_t holder) const {
  uint64_t owner = seg_->lanes[holder - 1].owner.load(std::memory_order_acquire);
  LaneState state = StateOf(owner);
  return state == kFree || state == kReaping || !proc::MayBeAlive(IdentityOf(owner));
}

// Takes lane `index`'s spare word for `holder` (the lane's owner, another lane taking its spare
// bytes back, or kSpareReclaimer, which must hold the reclaim lock), waiting for a live holder to
// finish and taking over from a dead one. Returns the lane's spare bytes, or -1 (never to the
// owner or a reclaimer) when the word is left to a reclaimer: a taker does not take it from a
// reclaimer, nor from the lane's own owner that died mid-operation.
int64_t Budget::LockSpare(int index, uint32_t holder) {
  BudgetLane& lane = seg_->lanes[index];
  const uint32_t own = static_cast<uint32_t>(index) + 1;
  for (uint32_t spin = 1;; ++spin) {
    uint64_t s = lane.spare.load(std::memory_order_acquire);
    uint32_t h = HolderOf(s);
    if (h == 0) {
      // A free word carries the lane's sequence number as of its last operation.
      if (lane.spare.compare_exchange_weak(s, SpareWord(SpareBytes(s), holder, HeldSeq(s)),
                                           std::memory_order_acq_rel, std::memory_order_acquire)) {
        return static_cast<int64_t>(SpareBytes(s));
      }
      continue;
    }
    bool gone = false, reclaim_locked = false;
    if (h == kSpareReclaimer) {
      if (holder == kSpareReclaimer) {
        gone = true;  // one reclaimer at a time: to a reclaimer, this is one that died
      } else if (holder != own) {
        return -1;
      } else if (spin % 256 == 0) {
        // A reclaimer holds a living lane's word only briefly; if the reclaim lock is free, it
        // died doing so.
        int r = pthread_mutex_trylock(&seg_->reclaim_lock);
        if (r == EOWNERDEAD) pthread_mutex_consistent(&seg_->reclaim_lock);
        gone = reclaim_locked = r == 0 || r == EOWNERDEAD;
      }
    } else {
      // Looking through /proc now and then only: a live holder is done in well under a
      // microsecond unless it was descheduled.
      gone = spin % 256 == 0 && HolderGone(h);
      if (gone && h == own && holder != kSpareReclaimer) return -1;
    }
    if (!gone) {
      Relax(spin);
      continue;
    }
    int64_t bytes = TakeOverSpare(index, s, holder);
    if (reclaim_locked) pthread_mutex_unlock(&seg_->reclaim_lock);
    if (bytes >= 0) return bytes;
  }
}

// The holder named in `word` died holding lane `index`'s spare word, at most one operation into
// the lane's records: takes the word for `holder`, and finishes or discards that operation as
// reclaim does. If it happened, the holder was taking the spare bytes back (a reclaimer, the only
// one that takes over from an owner, does not use them). If not, the lane's sequence number is
// moved on, so that no later word can look like the dead holder's. -1 if the word changed.
int64_t Budget::TakeOverSpare(int index, uint64_t word, uint32_t holder) {
  BudgetLane& lane = seg_->lanes[index];
  if (!lane.spare.compare_exchange_strong(word, SpareWord(SpareBytes(word), holder, HeldSeq(word)),
                                          std::memory_order_acq_rel)) {
    return -1;
  }
  ResolveInFlight(index);
  uint64_t bytes = 0;
  if ((RecordSeq(lane.committed.load(std::memory_order_acquire)) & kTagSeqMask) == HeldSeq(word)) {
    bytes = SpareBytes(word);
    Apply(index, 0, false);
  }
  uint32_t seq = RecordSeq(lane.committed.load(std::memory_order_acquire));
  lane.spare.store(SpareWord(bytes, holder, seq), std::memory_order_release);
  return static_cast<int64_t>(bytes);
}

void Budget::UnlockSpare(int lane, uint64_t bytes) {
  uint32_t seq = RecordSeq(seg_->lanes[lane].committed.load(std::memory_order_acquire));
  seg_->lanes[lane].spare.store(SpareWord(bytes, 0, seq), std::memory_order_release);
}

// Gives every other lane's spare bytes back to `global`.
void Budget::CollectSpares(int mine) {
  uint32_t hwm = seg_->lane_high_water.load(std::memory_order_acquire);
  for (uint32_t i = 0; i < hwm; ++i) {
    int index = static_cast<int>(i);
    if (index == mine || SpareOf(index) == 0) continue;
    int64_t bytes = LockSpare(index, static_cast<uint32_t>(mine) + 1);
    if (bytes < 0) continue;
    if (bytes > 0) Apply(index, -bytes, false);
    UnlockSpare(index, 0);
  }
}

// The calling thread's own lane: LockSpare never answers -1 to its owner.
uint64_t Budget::LockOwnSpare(int lane) {
  return static_cast<uint64_t>(LockSpare(lane, static_cast<uint32_t>(lane) + 1));
}

bool Budget::TryReserve(int lane, uint64_t bytes) {
  if (bytes > kMaxBudgetBytes) return false;
  uint64_t spare = LockOwnSpare(lane);
  uint64_t from_spare = spare < bytes ? spare : bytes;
  bool ok = from_spare == bytes || Apply(lane, static_cast<int64_t>(bytes - from_spare), true);
  UnlockSpare(lane, ok ? spare - from_spare : spare);
  return ok;
}

bool Budget::Reserve(int lane, const ProcessId& self, uint64_t bytes) {
  if (bytes > kMaxBudgetBytes) return false;
  if (MemberDied()) Reclaim(self, /*wait=*/false);
  if (TakeSpare(lane, bytes) || TryReserve(lane, bytes)) return true;
  // Over the limit: other threads' spare bytes, and then what dead processes still hold, may be
  // the difference (reclaimed by us or by whoever held the reclaim lock meanwhile).
  CollectSpares(lane);
  if (TryReserve(lane, bytes)) return true;
  Reclaim(self, /*wait=*/true);
  return TryReserve(lane, bytes);
}

void Budget::Release(int lane, uint64_t bytes) {
  if (GiveSpare(lane, bytes)) return;
  uint64_t spare = LockOwnSpare(lane);
  Apply(lane, -static_cast<int64_t>(bytes), false);
  UnlockSpare(lane, spare);
}

void Budget::ReleaseSpare(int lane) {
  uint64_t spare = LockOwnSpare(lane);
  if (spare > 0) Apply(lane, -static_cast<int64_t>(spare), false);
  UnlockSpare(lane, 0);
}

bool Budget::MemberDied() const {
  uint32_t hwm = seg_->member_high_water.load(std::memory_order_acquire);
  for (uint32_t m = 0; m < hwm; ++m) {
    if (!(FutexWord(&seg_->member_alive[m]) & kFutexOwnerDied)) continue;
    uint64_t seen = seg_->member_alive_at_ms[m].load(std::memory_order_relaxed);
    if (seen == 0 || NowMs() - seen >= kRecheckMs) return true;
  }
  return false;
}

int Budget::JoinMember(const ProcessId& self) {
  for (int pass = 0; pass < 2; ++pass) {
    int m = TryJoinMember(self);
    if (m >= 0 || pass == 1) return m;
    Reclaim(self, /*wait=*/true);  // all slots taken: some may belong to processes that are gone
  }
  return -1;
}

int Budget::TryJoinMember(const ProcessId& self) {
  for (int m = 0; m < kBudgetMembers; ++m) {
    uint64_t expected = 0;
    if (!seg_->member_owner[m].compare_exchange_strong(expected, Owner(kActive, self),
                                                       std::memory_order_acq_rel)) {
      continue;
    }
    AdoptMember(m);
    uint32_t hwm = seg_->member_high_water.load(std::memory_order_acquire);
    while (hwm < static_cast<uint32_t>(m + 1) &&
           !seg_->member_high_water.compare_exchange_weak(hwm, m + 1, std::memory_order_acq_rel)) {
    }
    return m;
  }
  return -1;
}

void Budget::AdoptMember(int m) {
  if (pthread_mutex_lock(&seg_->member_alive[m]) == EOWNERDEAD) {
    pthread_mutex_consistent(&seg_->member_alive[m]);
  }
}

void Budget::HandOverMember(int m) { pthread_mutex_unlock(&seg_->member_alive[m]); }

int Budget::AcquireLane(const ProcessId& self) {
  for (int pass = 0; pass < 2; ++pass) {
    uint32_t hwm = seg_->lane_high_water.load(std::memory_order_acquire);
    // An idle lane of our own process first: what it holds is ours anyway.
    for (uint32_t i = 0; i < hwm; ++i) {
      uint64_t idle = Owner(kIdle, self);
      if (seg_->lanes[i].owner.compare_exchange_strong(idle, Owner(kActive, self),
                                                       std::memory_order_acq_rel)) {
        return static_cast<int>(i);
      }
    }
    for (int i = 0; i < kBudgetLanes; ++i) {
      uint64_t free_owner = 0;
      if (!seg_->lanes[i].owner.compare_exchange_strong(free_owner, Owner(kActive, self),
                                                        std::memory_order_acq_rel)) {
        continue;
      }
      uint32_t h = seg_->lane_high_water.load(std::memory_order_acquire);
      while (h < static_cast<uint32_t>(i + 1) &&
             !seg_->lane_high_water.compare_exchange_weak(h, i + 1, std::memory_order_acq_rel)) {
      }
      return i;
    }
    if (pass == 0) Reclaim(self, /*wait=*/true);
  }
  return -1;
}

void Budget::IdleLane(int lane, const ProcessId& self) {
  ReleaseSpare(lane);
  uint64_t active = Owner(kActive, self);
  seg_->lanes[lane].owner.compare_exchange_strong(active, Owner(kIdle, self),
                                                  std::memory_order_acq_rel);
}

// Finishes or discards the dead owner's operation in flight, so that `committed` is exactly what
// the lane holds in `global`.
void Budget::ResolveInFlight(int index) {
  BudgetLane& lane = seg_->lanes[index];
  uint64_t committed = lane.committed.load(std::memory_order_acquire);
  uint64_t pending = lane.pending.load(std::memory_order_acquire);
  if (RecordSeq(pending) != ((RecordSeq(committed) + 1) & kSeqMask)) return;
  // Every swap of `global` first commits the operation its tag names, so an operation that
  // reached `global` is either committed already or still named by the tag.
  uint64_t global = seg_->global.load(std::memory_order_acquire);
  if (TagLane(global) == index && TagSeq(global) == (RecordSeq(pending) & kTagSeqMask)) {
    HelpCommit(global);
  }
}

// Takes the reclaim lock: at once, or with `wait` within 50 ms. Whether it is held.
bool Budget::LockReclaim(bool wait) {
  int locked;
  if (wait) {
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_nsec += 50 * 1000 * 1000;
    if (deadline.tv_nsec >= 1000000000) {
      deadline.tv_sec += 1;
      deadline.tv_nsec -= 1000000000;
    }
    locked = pthread_mutex_timedlock(&seg_->reclaim_lock, &deadline);
  } else {
    locked = pthread_mutex_trylock(&seg_->reclaim_lock);
  }
  if (locked == EOWNERDEAD) {
    pthread_mutex_consistent(&seg_->reclaim_lock);
  } else if (locked != 0) {
    return false;
  }
  return true;
}

// Claims (kReaping) the lanes of processes that are gone, below the high-water mark `hwm`, and
// settles each one's operation in flight.
void Budget::ClaimDeadLanes(const ProcessId& self, LivenessCache& liveness, uint32_t hwm,
                            bool* claimed) {
  for (uint32_t i = 0; i < hwm; ++i) {
    BudgetLane& lane = seg_->lanes[i];
    uint64_t owner = lane.owner.load(std::memory_order_acquire);
    if (StateOf(owner) == kFree || SameProcess(owner, self)) continue;
    if (liveness.Alive(IdentityOf(owner))) continue;
    if (lane.owner.compare_exchange_strong(owner, Owner(kReaping, self),
                                           std::memory_order_acq_rel)) {
      // Once claimed, nobody but a reclaimer takes the lane's spare word; a live thread taking the
      // lane's spare bytes back is waited for.
      LockSpare(static_cast<int>(i), kSpareReclaimer);
      ResolveInFlight(static_cast<int>(i));
      claimed[i] = true;
    }
  }
}

// A dead thread may have held a living lane's spare word, taking its spare bytes back: finish
// that before the dead thread's lane is freed and its number given to another. So may a
// reclaimer that died doing this.
void Budget::FinishDeadSpareHolds(uint32_t hwm, const bool* claimed) {
  for (uint32_t i = 0; i < hwm; ++i) {
    uint32_t holder = HolderOf(seg_->lanes[i].spare.load(std::memory_order_acquire));
    if (claimed[i] || holder == 0) continue;
    // Held by a dead lane's thread, or by a reclaimer that died (we hold the reclaim lock).
    if (holder != kSpareReclaimer && !claimed[holder - 1]) continue;
    int64_t spare = LockSpare(static_cast<int>(i), kSpareReclaimer);
    UnlockSpare(static_cast<int>(i), static_cast<uint64_t>(spare));
  }
}

// Releases what the claimed lanes hold, negative amounts first, and frees the lanes; the net
// bytes released.
int64_t Budget::ReleaseClaimedLanes(uint32_t hwm, bool* claimed) {
  int64_t released = 0;
  for (int pass = 0; pass < 2; ++pass) {
    for (uint32_t i = 0; i < hwm; ++i) {
      if (!claimed[i]) continue;
      BudgetLane& lane = seg_->lanes[i];
      int64_t held = Value(lane.committed.load(std::memory_order_acquire));
      if ((pass == 0) != (held <= 0)) continue;
      if (held != 0) Apply(static_cast<int>(i), -held, false);
      released += held;
      UnlockSpare(static_cast<int>(i), 0);
      claimed[i] = false;  // freed: another thread may take it at once
      lane.owner.store(kFree, std::memory_order_release);
    }
  }
  return released;
}

// Frees the member slots of processes that are gone.
void Budget::FreeDeadMembers(const ProcessId& self, LivenessCache& liveness) {
  uint32_t members = seg_->member_high_water.load(std::memory_order_acquire);
  for (uint32_t m = 0; m < members; ++m) {
    uint64_t owner = seg_->member_owner[m].load(std::memory_order_acquire);
    if (owner == 0) continue;
    pthread_mutex_t* alive = &seg_->member_alive[m];
    if (SameProcess(owner, self)) {
      // Our own slot from before an exec: marked by the kernel then, and alive as we are.
      if (FutexWord(alive) & kFutexOwnerDied) {
        seg_->member_alive_at_ms[m].store(NowMs(), std::memory_order_relaxed);
      }
      continue;
    }
    if (liveness.Alive(IdentityOf(owner))) {
      // Alive, yet its mutex says the owner died: the process is still exiting, or it replaced
      // itself with exec (the kernel releases robust mutexes then). Look again in a while.
      if (FutexWord(alive) & kFutexOwnerDied) {
        seg_->member_alive_at_ms[m].store(NowMs(), std::memory_order_relaxed);
      }
      continue;
    }
    // Taking the dead member's mutex makes this reclaimer its only cleaner. It is marked "owner
    // died" unless the process ended while handing it from one thread to another.
    int r = pthread_mutex_trylock(alive);
    if (r == EOWNERDEAD) {
      pthread_mutex_consistent(alive);
    } else if (r != 0) {
      continue;
    }
    // A new process may have joined the slot since the identity was read.
    seg_->member_alive_at_ms[m].store(0, std::memory_order_relaxed);
    seg_->member_owner[m].compare_exchange_strong(owner, 0, std::memory_order_acq_rel);
    pthread_mutex_unlock(alive);
  }
}

uint64_t Budget::Reclaim(const ProcessId& self, bool wait) {
  // One reclaimer at a time: a dead process's lanes may hold negative amounts (freed on another
  // thread than they were allocated on), and they must be released before the positive ones so
  // that `global` never drops below what the living hold. A reclaimer that dies leaves its
  // claimed lanes in kReaping under its own identity for the next one. Nobody waits long for the
  // lock (its holder may be stopped in a debugger): an opportunistic reclaim does not wait at
  // all, one that would let a reservation through waits up to 50 ms.
  if (!LockReclaim(wait)) return 0;
  LivenessCache liveness;
  bool claimed[kBudgetLanes] = {};
  uint32_t hwm = seg_->lane_high_water.load(std::memory_order_acquire);
  ClaimDeadLanes(self, liveness, hwm, claimed);
  FinishDeadSpareHolds(hwm, claimed);
  const int64_t released = ReleaseClaimedLanes(hwm, claimed);
  FreeDeadMembers(self, liveness);
  pthread_mutex_unlock(&seg_->reclaim_lock);
  return released > 0 ? static_cast<uint64_t>(released) : 0;
}

}  // namespace gpufrac::limiter
