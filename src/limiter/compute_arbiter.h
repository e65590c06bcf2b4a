// Who may put work on a shared GPU, so that each workload gets its share of the GPU's time.
//
// The GPU itself time-slices between the processes that have work queued, equally, whatever they
// asked for. To give a workload with a compute request of 0.25 a quarter and one with 0.75 three
// quarters, the workloads on a GPU take turns: only the process holding the turn may queue work,
// so while it holds it the GPU runs its work alone. One segment per GPU, in the launcher's budget
// directory ("compute.<uuid>"), which every workload on the GPU joins:
//  - A workload has a slot: its compute request (its weight), its limit, and its virtual time,
//    the GPU time it was charged divided by its weight. The next turn goes to the waiting
//    workload with the least virtual time (weighted fair queueing), so busy workloads share the
//    GPU in proportion to their requests: each gets at least its request (requests on a GPU add
//    up to at most 1), and time others leave idle goes to the busy ones in proportion to their
//    requests. A workload that was idle starts again at the least virtual time of the others
//    (it does not bank credit while idle).
//  - A workload whose limit is below 1 may also take at most that share of the GPU's time: it
//    holds a token bucket of GPU time filled at its limit, at most half a turn deep, and waits
//    while it holds less than a quarter of a turn, even if the GPU is idle (strict).
//  - A turn lasts `turn_ns` (20 ms by default) for the heaviest busy workload, and for a lighter
//    one in proportion to its request (at least an eighth of that), so turns alternate. The
//    holder queues work, at most about half a turn's worth at a time (the launch hooks bound it
//    with events and measure how long its launches take on the GPU), and publishes when what it
//    queued will be done. When the turn is over it waits until that work ends within
//    kHandOverNs ("drains"), then hands the turn on: it is charged from the start of its turn
//    to the end of its work, and the next holder's turn starts there (or when that holder takes
//    it, if its thread runs later: the GPU's idle time between is nobody's). A waiter takes the
//    turn as the holder's published work ends, so the hand-over needs nothing from the holder's
//    own thread, which a busy CPU may not run for milliseconds.
//    With nobody else waiting and no limit, a turn is simply renewed, without draining.
//  - A turn is the workload's: it is handed to its slot, the first of its processes to come takes
//    it (the turn is timed from then), and every process of the workload may then launch, as its
//    streams may: the GPU time-slices between them within the workload's turn, and nothing waits
//    for a sibling's thread. The workload's work is done when the last of theirs is. The first of
//    them to find the turn over drains its own work and hands it on.
//  - A holder that stops queueing work, dies or is stopped loses its turn: once its turn is over
//    a waiter takes it as soon as the holder's published work ends within kHandOverNs (when
//    that is not known: after kStealSlackNs without a launch or a wait if the holder is not
//    draining), after kDrainGraceNs at the latest, at once if its process is gone, so that no
//    process can stall the others beyond a bounded time. A holder whose published work runs out
//    competes for the next turn as a waiter would (it is about to queue more). Within its turn,
//    a holder whose published work ran out kStealSlackNs ago, and that has neither launched nor
//    stopped waiting since, has gone quiet: a waiter takes the rest of its turn (it is charged up
//    to the end of its work, and waits like anyone else when it comes back). A turn handed to
//    a workload none of whose processes takes it within kClaimNs passes on.
//  - Waiting sleeps on a futex in the segment (no spinning); hand-overs happen under a robust
//    process-shared mutex that is only ever locked with a timeout. A process that waited
//    kMaxWaitNs for one turn, could not take the lock, or was starved over a window goes without
//    turns for kBypassNs.
//  - What a workload is charged is estimated from its turns, and replaced by what the driver
//    measured of its processes' GPU time where it can (MeasureBy, own_gpu_time.h).
//
// The fast path of a launch (its workload holds the turn, nobody else waits, no limit) is two
// relaxed loads. Everything here is heap-free; only the slow path makes system calls.
//
// Trust: every workload on the GPU can write the segment (it is how they take turns), so a hostile
// one can disturb the turns. Waits are bounded, so a member that stalls the others meets their
// bypass: the GPU's equal share of time. But its charges and its weight are in the segment, and
// written by its own processes: one that writes them takes more than its share, up to just below
// what would trip its neighbours' starvation bypass (issue 31: a root-side arbiter decides what
// nobody else may write). One that truncates the file would make the others' mappings fault:
// arbiter_guard.h keeps them running, without turns.
#pragma once

#include <pthread.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace gpufrac::limiter {

constexpr int kArbiterSlots = 64;
// A segment's first fields: what makes it an arbiter of this layout.
constexpr uint64_t kArbiterMagic = 0x6770756672616361ULL;  // "gpufraca"
constexpr uint32_t kArbiterVersion = 4;
// The heaviest busy workload's turn; a lighter one's is shorter in proportion to its request, but
// never below turn_ns / kShortestTurnDivisor.
constexpr uint64_t kDefaultTurnNs = 20'000'000;
constexpr uint64_t kShortestTurnDivisor = 8;
// How much of a holder's work may still be queued when its turn passes on, so that the next
// holder's first work is queued before the GPU would idle. None: with 1 ms, and again with
// 0.3 ms, a workload of 2 ms kernels at 0.25 beside one of 0.5 ms kernels at 0.75 got 0.27
// (charged 0.25), where the test allows 0.02. The next holder's kernels arrive while the last
// one's still runs, the GPU time-slices between the two, and what is left of the last kernel
// runs in the next turn, uncharged. Only a dependency on the GPU (the next holder's stream
// waiting on an event of the last one's) would start its work exactly as the last work ends.
constexpr uint64_t kHandOverNs = 0;
// How long a draining holder keeps its turn past its end (a kernel longer than this is shared
// with the next holder, as the GPU would).
constexpr uint64_t kDrainGraceNs = 250'000'000;
// A turn given back to a holder that was draining (its work ran out, and its workload was still
// the most owed) keeps only this grace past its end: long enough for a thread a busy CPU has not
// run yet, short enough that a stopped or frozen holder does not keep the others waiting.
constexpr uint64_t kGivenBackGraceNs = 5'000'000;
// ArbiterSegment::draining: 0, kDrainOwn (the holder is waiting for its own work), or
// kDrainGivenBack (it was, when its turn was given back to it).
constexpr uint32_t kDrainOwn = 1;
constexpr uint32_t kDrainGivenBack = 2;
constexpr uint64_t DrainGraceNs(uint32_t drain_state) {
  return drain_state == kDrainGivenBack ? kGivenBackGraceNs : kDrainGraceNs;
}
// A workload that neither held nor waited for a turn for this long was idle: it starts again at
// the others' virtual time, and a holder no longer counts on it coming back.
constexpr uint64_t kIdleNs = 100'000'000;
// A holder whose turn is over and that neither launched nor waited for its work for this long
// has stopped using the GPU: a waiter takes the turn.
constexpr uint64_t kStealSlackNs = 2'000'000;
// A slot whose workload neither held nor waited for a turn for this long is given to a new
// workload when no slot is free (its workload ended; if it comes back, it joins again).
constexpr uint64_t kStaleNs = 60'000'000'000;
// A turn handed to a workload that none of its processes takes within kClaimNs goes to the next,
// and that workload is passed over for kMissedNs (its waiters may be stopped or dead).
constexpr uint64_t kClaimNs = 5'000'000;
constexpr uint64_t kMissedNs = 1'000'000'000;
// A process that waited this long for one turn, or could not take the arbiter's lock, or over a
// window of kStarveWindowNs had its workload hold turns for less than a quarter of its request
// while mostly waiting, stops taking turns for kBypassNs: the arbiter is not working for it (a
// stuck or hostile member), and the GPU's own equal time-slicing is better than waiting on it.
constexpr uint64_t kMaxWaitNs = 2'000'000'000;
constexpr uint64_t kStarveWindowNs = 2'000'000'000;
constexpr uint64_t kBypassNs = 10'000'000'000;

// The clock turns are timed by (CLOCK_MONOTONIC, ns).
uint64_t MonotonicNs();

struct alignas(64) ArbiterSlot {
  std::atomic<uint64_t> key;       // hash of the workload's id, 0 = free
  std::atomic<uint32_t> weight;    // compute request, thousandths (1..1000)
  std::atomic<uint32_t> limit;     // compute limit, thousandths (weight..1000)
  std::atomic<uint32_t> waiting;   // threads of its processes waiting for a turn
  std::atomic<uint64_t> vtime;     // charged ns * 1000 / weight
  std::atomic<int64_t> tokens_ns;  // limited slots: GPU time it may still take
  std::atomic<uint64_t> tokens_at_ns;
  std::atomic<uint64_t> used_ns;     // all GPU time charged to it, for status and metrics
  // What turns charged it (estimates), and how much of that the last measure replaced.
  std::atomic<uint64_t> estimated_ns;
  std::atomic<uint64_t> measured_mark_ns;
  std::atomic<uint64_t> busy_at_ns;  // when it last held or waited for a turn
  // When a turn handed to it went untaken (its waiting processes were stopped or killed).
  std::atomic<uint64_t> missed_at_ns;
};

struct ArbiterSegment {
  uint64_t magic;
  uint32_t version;
  std::atomic<uint32_t> ready;
  uint64_t turn_ns;
  pthread_mutex_t lock;  // robust, process-shared; hand-overs only
  // The turn: (slot + 1) << 32 | pid of the process that took it for its workload; pid 0: handed
  // to the slot, for any of its processes to take; 0: nobody.
  alignas(64) std::atomic<uint64_t> holder;
  std::atomic<uint32_t> check;      // the holder must look at the clock: someone waits, or a limit
  std::atomic<uint32_t> draining;   // kDrainOwn / kDrainGivenBack: the holder waits for its work
  std::atomic<uint64_t> active_ns;  // when the holder last launched or stopped waiting
  std::atomic<uint64_t> turn_start_ns;
  std::atomic<uint64_t> deadline_ns;
  // When the work the holding workload's processes queued will be done, by their measures of
  // their launches; 0: not known. Reset at every hand-over.
  std::atomic<uint64_t> queued_until_ns;
  alignas(64) std::atomic<uint32_t> seq;  // futex word, bumped at every hand-over
  alignas(64) ArbiterSlot slots[kArbiterSlots];
};

// Where a process learns the GPU time it used, as the driver measured it (own_gpu_time.h).
class GpuTimeSource {
 public:
  enum class Measured {
    kNothing,   // no new measure (not due yet, or the driver has none)
    kBaseline,  // counting starts again: what was charged until now stands
    kTime,      // `ns`: the GPU time since the last measure
  };
  virtual Measured Take(uint64_t now_ns, uint64_t* ns) = 0;
  // When Take may next measure (a load; 0: any time).
  virtual uint64_t NextPollNs() const = 0;

 protected:
  ~GpuTimeSource() = default;
};

// One process's membership of one GPU's arbiter.
class ComputeArbiter {
 public:
  // For launchers: makes the segment `name` in their budget directory `dir_fd` unless a segment
  // of this version exists (the directory is theirs: only they create names in it; anything else
  // there is replaced), readable and writable by every workload (mode 0666). False with a reason
  // otherwise.
  static bool CreateAt(int dir_fd, const char* name, uint64_t turn_ns, char* err, size_t err_len);

  // For launchers: what the segment `name` of their budget directory says of `workload`: the GPU
  // time charged to it so far, and whether it holds the turn now; read with pread after checking
  // it is a segment-sized regular file, never blocking (every workload can write the segment,
  // so neither decides anything for another workload). False when it has no slot there.
  struct Peeked {
    uint64_t used_ns = 0;
    bool holds_turn = false;
  };
  static bool Peek(int dir_fd, const char* name, const char* workload, Peeked* out);
  static bool PeekUsedNs(int dir_fd, const char* name, const char* workload, uint64_t* ns) {
    Peeked peeked;
    if (!Peek(dir_fd, name, workload, &peeked)) return false;
    *ns = peeked.used_ns;
    return true;
  }

  // Maps `dir`/`name` (never creates it) and joins as workload `workload` with request
  // `weight` and limit `limit` (thousandths). False with a reason.
  bool Attach(const char* dir, const char* name, const char* workload, uint32_t weight,
              uint32_t limit, char* err, size_t err_len);
  bool attached() const { return seg_ != nullptr; }
  // Charges this workload what `source` measured of this process's GPU time instead of what its
  // turns were estimated to take: each new measure replaces the estimates charged to the
  // workload since the last one (Measure). Unset, the estimates stand.
  void MeasureBy(GpuTimeSource* source) { measure_ = source; }
  // Takes a new measure when one is due (a clock read and a load when not).
  void Measure();

  // What a launch must do first.
  enum class Gate { kGo, kDrainThenRelease, kAcquire };
  Gate Check() {
    const uint64_t h = seg_->holder.load(std::memory_order_relaxed);
    if (Taken(h) && !limited_ && seg_->check.load(std::memory_order_relaxed) == 0) {
      return Gate::kGo;
    }
    return CheckSlow(h);
  }
  // After draining: charges this process's workload for its turn, up to `work_end_ns` (when its
  // queued work will be done; 0 or past: done now), and hands the turn on from then, or keeps it
  // when this workload is still the most owed (true: it holds a new turn). True at once when the
  // turn is not over (another of its processes handed it on and got it back).
  bool Release(uint64_t work_end_ns = 0);
  // Blocks (sleeping) until this process holds a turn; false when the arbiter could not be used
  // (its lock was held too long), in which case the launch goes ahead without a turn.
  bool Acquire();
  // Whether to bound and track in-flight work: someone else waits or this workload is limited.
  bool Contended() const { return seg_->check.load(std::memory_order_relaxed) != 0; }
  // The holder is (or is no longer) blocked waiting for its own work; nothing when this process's
  // workload does not hold the turn (it bypasses the arbiter, or the turn was taken from it).
  void SetDraining(bool draining) {
    if (!Holding()) return;
    seg_->draining.store(draining ? kDrainOwn : 0, std::memory_order_relaxed);
    if (!draining) Touch();
  }
  // The holder is active (it launches): a turn that is over is taken from it only once it has
  // been inactive for kStealSlackNs, since it is about to notice the end and finish the turn.
  // Nothing when this process's workload does not hold the turn.
  void Touch();

  // A process of the holding workload publishes when the work it queued will be done: the
  // workload's work is done when all of its processes' is (the latest they published; a process
  // whose own end was the latest may move it sooner). Nothing when its workload does not hold
  // the turn.
  void Queued(uint64_t until_ns);

  // How long the current turn is (at most turn_ns).
  uint64_t TurnNs() const {
    const uint64_t start = seg_->turn_start_ns.load(std::memory_order_relaxed);
    const uint64_t deadline = seg_->deadline_ns.load(std::memory_order_relaxed);
    return deadline > start && deadline - start < seg_->turn_ns ? deadline - start : seg_->turn_ns;
  }
  // When the current turn began (or begins: when the last holder's work ends).
  uint64_t TurnStartNs() const { return seg_->turn_start_ns.load(std::memory_order_relaxed); }
  // Whether this process's workload holds the turn now (one of its processes took it).
  bool Holding() const { return Taken(seg_->holder.load(std::memory_order_relaxed)); }
  // GPU time charged to this workload so far.
  uint64_t UsedNs() const;
  // In a forked child: a process of its parent's workload.
  void ForkedChild() {
    pthread_mutex_init(&account_lock_, nullptr);
    pthread_mutex_init(&measure_lock_, nullptr);
    unapplied_ = GpuTimeSource::Measured::kNothing;
    unapplied_ns_ = 0;
    has_unapplied_.store(false, std::memory_order_relaxed);
    window_start_ns_ = window_waited_ns_ = window_held_ns_ = acquired_at_ns_ = 0;
    drain_seq_.store(kNoSeq, std::memory_order_relaxed);
    published_ns_.store(0, std::memory_order_relaxed);
    if (seg_ != nullptr) {
      token_ = (static_cast<uint64_t>(slot_) + 1) << 32 | static_cast<uint32_t>(getpid());
    }
  }

 private:
  // Whether `holder` is this process's workload, with the turn taken by one of its processes.
  bool Taken(uint64_t holder) const {
    return holder >> 32 == token_ >> 32 && static_cast<uint32_t>(holder) != 0;
  }
  Gate CheckSlow(uint64_t holder);
  // Takes a turn handed to this workload (`holder`: its slot, pid 0).
  bool Claim(uint64_t holder);
  // Under the lock: finds or claims this workload's slot (see kStaleNs). False when all are in
  // use.
  bool JoinLocked(uint64_t now);
  // Joins again when its slot was given to another workload while it was idle (see kStaleNs);
  // false (bypassing) when it cannot.
  bool Rejoin();
  // Under the lock, for a waiter back from idleness: charges the holder up to now and raises
  // this workload's virtual time to the least of those using the GPU.
  void ComeBackFromIdle(uint64_t holder, uint64_t now);
  // Under the lock, for a waiter: hands on a turn nobody holds or nobody came for, or passes it
  // from a holder that is done with it (PassFromHolder).
  void MoveTurnOn(uint64_t holder, uint64_t now);
  // Under the lock: how long a waiter sleeps before looking at the turn again.
  uint64_t SleepNs(uint64_t holder, uint64_t now) const;
  // Stops taking turns for kBypassNs (once per period, a line on stderr says why).
  void Bypass(uint64_t now, const char* why);
  bool Lock();
  bool TryLock();
  void Unlock();
  // Under the lock, for a waiter: passes the turn from `holder` (a process) when it has gone
  // quiet within its turn, or its turn is over and it is not finishing it (see the contract).
  void PassFromHolder(uint64_t holder, uint64_t now);
  // Under the lock, by a waiter that has just taken a turn: the turn starts `now` if it was to
  // start earlier (the waiter's thread ran late), so that the GPU's idle time between the last
  // holder's work and this one's first is charged to neither, and the turn keeps its length.
  void BeginTurn(uint64_t now);
  // Under the lock: gives the turn to the best waiting slot (or nobody), starting at `start`
  // (when the last holder's work ends; at least `now`), and wakes the waiters.
  void HandOver(uint64_t now, uint64_t start);
  void HandOver(uint64_t now) { HandOver(now, now); }
  // Under the lock: charges `slot` `ns` of GPU time, as estimated from a turn.
  void Charge(int slot, uint64_t ns);
  // Under the lock: this process's GPU time measured since its last measure was `measured`: it
  // replaces what turns charged its workload since the workload's last measure. (Measures of its
  // other processes come at other times; what one misses, the next covers: the workload's charge
  // is what the driver measured, give or take its latest period.) None: a new baseline, what
  // turns charged until now stands.
  void ChargeMeasured(std::optional<uint64_t> measured);
  GpuTimeSource* measure_ = nullptr;
  // Measured and not yet charged (the arbiter's lock was busy), under measure_lock_.
  pthread_mutex_t measure_lock_ = PTHREAD_MUTEX_INITIALIZER;
  GpuTimeSource::Measured unapplied_ = GpuTimeSource::Measured::kNothing;
  uint64_t unapplied_ns_ = 0;
  std::atomic<bool> has_unapplied_{false};  // unapplied_ is not kNothing, read without the lock
  // Under the lock: adds what `slot`'s bucket filled since it was last filled.
  void Refill(int slot, uint64_t now);
  bool Eligible(int slot, uint64_t now);

  ArbiterSegment* seg_ = nullptr;
  int slot_ = -1;
  uint64_t token_ = 0;  // (slot + 1) << 32 | pid
  bool limited_ = false;
  std::atomic<uint64_t> bypass_until_ns_{0};
  // The hand-over count when this process last found its workload's turn over (kNoSeq: never).
  static constexpr uint64_t kNoSeq = UINT64_MAX;
  std::atomic<uint64_t> drain_seq_{kNoSeq};
  // The work end this process last published (Queued).
  std::atomic<uint64_t> published_ns_{0};
  // This process's own account of its turns (no other process can write it), per window.
  pthread_mutex_t account_lock_ = PTHREAD_MUTEX_INITIALIZER;
  uint64_t window_start_ns_ = 0;
  uint64_t window_waited_ns_ = 0;
  uint64_t window_held_ns_ = 0;
  uint64_t acquired_at_ns_ = 0;  // when it last got a turn; 0 while waiting
  uint32_t weight_ = 1000;
  uint32_t limit_milli_ = 1000;
  uint64_t key_ = 0;
  // Adds a wait from `began` to `now` (and the turn held before it) to the window and bypasses
  // when the window shows the arbiter failing this process.
  void Account(uint64_t began, uint64_t now, bool holding);
};

}  // namespace gpufrac::limiter
