// The shared memory budget of one workload on one GPU: every process of the workload maps the
// same segment, reserves bytes in it before the driver allocates, and can never, even briefly,
// hold more than the limit together with the others.
//
// How it stays exact without locks, including when a process is killed at any instruction:
//  - `global` is one 64-bit word: the bytes in use (signed 40 bits) and a tag naming the last
//    operation that changed it (lane, sequence number). Reserving is one compare-and-swap on it.
//  - Each thread owns a lane (a cache line) recording what its process holds (`committed`, a
//    running sum with the lane's sequence number) and the operation it is doing (`pending`).
//  - An operation writes `pending`, swaps `global` (tagging it), folds itself into `committed`,
//    and then marks the tag committed if `global` still carries it. Before anyone swaps `global`,
//    they first finish ("help") the commit of the operation named by the current tag unless it is
//    marked. So at any moment at most one operation is in global but not yet in its lane, and the
//    tag names it. The mark spares the next operation a look at another process's lane.
//  - When a process dies, a survivor finishes or discards its in-flight operation (it reached
//    `global` exactly when the tag still names it) and then releases what its lanes hold.
//    The tag carries 13 bits of the lane's sequence, which bounds this: a thread stalled between
//    reading `global` and swapping it could mistake a later operation for the one it read if the
//    same lane ran exactly a multiple of 8,192 operations meanwhile, left the bytes in use where
//    they were, and was killed between its swap and its commit. Then that operation's delta
//    would stay in `global` without a record (a leaked charge, or an overrun by a free's size).
//  - Death is noticed without system calls: each member process holds a robust, process-shared
//    mutex in the segment, and the kernel marks it "owner died" when the process ends, however it
//    ends. Reserve reads those words (one per member process, packed together) and only then, on
//    that rare event, confirms the death through /proc and reclaims.
//  - Spare bytes keep most operations off `global`, which every process's operations would
//    otherwise pass one cache line between the cores through. A thread keeps what it releases, up
//    to kSpareMax (and a 64th of the limit), in its lane's `spare`: still charged in `global` and
//    `committed`, so the ceiling and a dead process's reclaim are unchanged. Its next reservation
//    takes from there with one compare-and-swap on its own cache line.
//  - A reservation that does not fit takes the other lanes' spare bytes back before it fails, so
//    they never cause an out-of-memory error. Only the thread holding a lane's `spare` word (its
//    owner, a thread taking the bytes back, or a reclaimer) may change that lane's records. A
//    holder that dies leaves its lane's sequence number in the word. Whoever takes the word over
//    resolves the lane's in-flight operation the way reclaim does, and the sequence number then
//    says whether the dead holder's operation happened.
//  - So `used` counts spare bytes as in use: at most kSpareMax per thread that released memory
//    recently and has not allocated or exited since.
// Hot paths (Reserve/Release/used) are heap-free and syscall-free; Reserve/Release are O(1) except
// for the dead-member check, which reads one 4-byte word per member process. The path that takes
// spare bytes back reads every lane, and may wait (yielding the CPU) for a holder to finish.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "proc/process_identity.h"

namespace gpufrac::limiter {

using proc::ProcessId;

constexpr int kBudgetLanes = 1024;
// Most bytes a lane keeps spare after releases (see above).
constexpr uint64_t kSpareMax = uint64_t{2} << 20;
// Largest limit a budget can hold (the in-use counter is a signed 40-bit field).
constexpr uint64_t kMaxBudgetBytes = (uint64_t{1} << 39) - 1;

struct alignas(64) BudgetLane {
  std::atomic<uint64_t> owner;      // state (2 bits) | pid (22 bits) | start ticks (40 bits)
  std::atomic<uint64_t> committed;  // bytes held (signed 40 bits) | sequence (24 bits)
  std::atomic<uint64_t> pending;    // delta in flight (signed 40 bits) | sequence (24 bits)
  // Bytes held but backing no allocation (40 bits) | holder (11 bits: 0 = none, else the lane + 1
  // of the thread working on this lane's records, or a reclaimer) | the low 13 bits of
  // `committed`'s sequence when the word was last given up.
  std::atomic<uint64_t> spare;
};

constexpr int kBudgetMembers = 256;

struct BudgetSegment {
  uint64_t magic;
  std::atomic<uint32_t> ready;
  uint32_t version;
  uint64_t limit;
  uint64_t context_bytes;
  uint64_t pid_namespace;  // the members' PID namespace: PIDs mean nothing outside it
  char uuid[48];
  alignas(64) std::atomic<uint64_t> global;
  alignas(64) std::atomic<uint32_t> lane_high_water;
  std::atomic<uint32_t> member_high_water;
  pthread_mutex_t reclaim_lock;  // robust, process-shared: one reclaimer at a time
  // A member's mutex is locked by a thread of the member process for as long as it lives.
  alignas(64) pthread_mutex_t member_alive[kBudgetMembers];
  std::atomic<uint64_t> member_owner[kBudgetMembers];  // packed identity, 0 = free
  // When a member marked "owner died" was last found alive (ms, coarse monotonic clock): it is
  // exiting, or it exec'd. Its mark is ignored for a while rather than cleared, so that its real
  // death is still noticed.
  std::atomic<uint64_t> member_alive_at_ms[kBudgetMembers];
  BudgetLane lanes[kBudgetLanes];
};

// Reclaim's memo of which processes are alive (budget.cc).
class LivenessCache;

class Budget {
 public:
  constexpr Budget() = default;
  Budget(const Budget&) = delete;
  Budget& operator=(const Budget&) = delete;
  // No destructor: inside the limiter the mapping must outlive every hook call, atexit handlers
  // included. Launchers and tests unmap with Close().
  void Close();

  // Maps the segment `name` in /dev/shm, creating it with `limit`/`context_bytes` if it does not
  // exist yet (the workload's own /dev/shm, as in a container). An existing segment keeps the
  // limit it was created with (a rewritten limit file cannot raise it). Returns false with a
  // reason in `err`.
  bool Open(const char* name, uint64_t limit, uint64_t context_bytes, char* err, size_t err_len);
  // Maps an existing segment only: `name` in /dev/shm, or in directory `dir` when it is not null
  // (a budget directory, where the launcher made it). Refuses anything but a regular file.
  bool Attach(const char* name, char* err, size_t err_len) { return AttachIn(nullptr, name, err, err_len); }
  bool AttachIn(const char* dir, const char* name, char* err, size_t err_len);
  static bool Unlink(const char* name);

  // For launchers, in a budget directory they opened as `dir_fd` (one the workload cannot create
  // names in), `name` without a leading '/':
  //  - CreateAt makes a new segment (never an existing one: O_EXCL, no link followed) with
  //    `limit` and `context_bytes`, owned by `uid`/`gid` (mode 0600) unless uid is -1;
  //  - UnlinkAt removes it;
  //  - PeekUsedAt reads the workload's usage with pread instead of a mapping, opening without
  //    blocking and refusing anything but a segment-sized regular file, so that a segment its
  //    owner truncated or rewrote can neither crash nor block the reader (a root service reads
  //    segments that belong to users). False if the segment is missing or not a budget.
  static bool CreateAt(int dir_fd, const char* name, uint64_t limit, uint64_t context_bytes,
                       int uid, int gid, char* err, size_t err_len);
  static bool UnlinkAt(int dir_fd, const char* name);
  static bool PeekUsedAt(int dir_fd, const char* name, uint64_t* used);

  // Registers process `self` as a member; the calling thread locks the member's liveness mutex
  // and must keep it locked for as long as it lives (see HandOverMember). Returns the member index,
  // or -1 if the segment has no free member slot.
  int JoinMember(const ProcessId& self);
  // The thread holding member `m`'s mutex is exiting: unlocks it so that another thread of the same
  // process can take it over with AdoptMember.
  void HandOverMember(int m);
  void AdoptMember(int m);

  // Takes a lane for the calling thread of process `self` (reusing an idle lane of the same
  // process first). Returns -1 if all lanes are taken by live processes.
  int AcquireLane(const ProcessId& self);
  // Hands a lane back to its process when its thread exits; what it holds stays charged, less
  // its spare bytes.
  void IdleLane(int lane, const ProcessId& self);

  // Reserves `bytes` through `lane`; false (and nothing reserved) if that would pass the limit,
  // even after taking back other lanes' spare bytes and reclaiming what dead member processes
  // held.
  bool Reserve(int lane, const ProcessId& self, uint64_t bytes);
  // Reserve from this lane's spare bytes and `global` only: fails whenever the bytes do not fit
  // right now.
  bool TryReserve(int lane, uint64_t bytes);
  // True if some member process has died since it was last reclaimed (a few plain loads).
  bool MemberDied() const;
  // Releases `bytes` previously reserved by any lane of the same process (into the lane's spare
  // bytes while they stay under the cap).
  void Release(int lane, uint64_t bytes);
  // Gives the lane's spare bytes back to `global`.
  void ReleaseSpare(int lane);

  // Releases everything held by lanes of processes that are no longer alive and frees their lanes
  // and member slots. Returns the bytes released. One reclaimer runs at a time: with `wait`
  // false this returns 0 at once if another is running, else it waits for it (50 ms at most).
  uint64_t Reclaim(const ProcessId& self, bool wait = true);

  uint64_t limit() const { return seg_->limit; }
  uint64_t context_bytes() const { return seg_->context_bytes; }
  // Bytes held by the workload now, spare bytes included (never negative).
  uint64_t used() const;
  // Bytes held through lanes of process `id`, spare bytes excluded (for tests and diagnostics).
  int64_t HeldBy(const ProcessId& id) const;
  // Spare bytes `lane` keeps now.
  uint64_t SpareOf(int lane) const;

 private:
  bool Map(int fd, char* err, size_t err_len);
  // Sizes, maps and initialises the new, empty segment `fd` (named `name` in messages).
  bool Initialise(int fd, const char* name, uint64_t limit, uint64_t context_bytes, char* err,
                  size_t err_len);
  bool AttachFd(int fd, const char* name, char* err, size_t err_len);
  bool Apply(int lane, int64_t delta, bool check_limit);
  void HelpCommit(uint64_t global_word);
  void ResolveInFlight(int lane);
  // Reclaim's steps, under the reclaim lock that LockReclaim takes.
  bool LockReclaim(bool wait);
  void ClaimDeadLanes(const ProcessId& self, LivenessCache& liveness, uint32_t hwm, bool* claimed);
  void FinishDeadSpareHolds(uint32_t hwm, const bool* claimed);
  int64_t ReleaseClaimedLanes(uint32_t hwm, bool* claimed);
  void FreeDeadMembers(const ProcessId& self, LivenessCache& liveness);
  uint64_t SpareCap() const;
  bool TakeSpare(int lane, uint64_t bytes);
  bool GiveSpare(int lane, uint64_t bytes);
  int64_t LockSpare(int lane, uint32_t holder);
  uint64_t LockOwnSpare(int lane);
  int64_t TakeOverSpare(int lane, uint64_t word, uint32_t holder);
  void UnlockSpare(int lane, uint64_t bytes);
  bool HolderGone(uint32_t holder) const;
  void CollectSpares(int lane);
  int TryJoinMember(const ProcessId& self);

  BudgetSegment* seg_ = nullptr;
};

}  // namespace gpufrac::limiter
