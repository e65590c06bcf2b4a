// Simulated GPU time: a kernel takes a modelled duration and each stream keeps the time its
// queued work completes on its context's engine clock (engine.h), so launches return at once (as
// on real hardware) and synchronisation sleeps until then. Model: 2 us + grid*block threads /
// (SMs * 2048) us.
#pragma once

#include <time.h>

#include <atomic>
#include <cstdint>

namespace gpufrac::simgpu {

// A fixed launch latency, plus one pass of the kernel's threads over every SM at full occupancy.
// 2048 resident threads per SM is the limit of V100, A100, H100 and B200; the model uses it for
// every GPU (T4's SMs hold 1024 and L4's 1536), which is close enough for scheduling tests.
inline constexpr std::uint64_t kKernelLaunchLatencyNs = 2000;
inline constexpr int kResidentThreadsPerSm = 2048;

// CLOCK_MONOTONIC in nanoseconds (vDSO, no syscall).
inline std::uint64_t NowNs() {
  timespec now;
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<std::uint64_t>(now.tv_sec) * 1000000000u +
         static_cast<std::uint64_t>(now.tv_nsec);
}

// Nanoseconds per thread of a kernel on a GPU with `sm_count` SMs (precomputed per context).
inline double KernelNsPerThread(int sm_count) {
  return 1000.0 / (static_cast<double>(sm_count) * kResidentThreadsPerSm);
}

inline std::uint64_t KernelDurationNs(double ns_per_thread, double threads) {
  constexpr double kMaxNs = 3600e9;  // an hour: keeps absurd grids from overflowing the clock
  const double ns = threads * ns_per_thread;
  return kKernelLaunchLatencyNs + static_cast<std::uint64_t>(ns < kMaxNs ? ns : kMaxNs);
}

// Raises `value` to at least `candidate`.
inline void AtomicMax(std::atomic<std::uint64_t>& value, std::uint64_t candidate) {
  std::uint64_t current = value.load(std::memory_order_relaxed);
  while (current < candidate &&
         !value.compare_exchange_weak(current, candidate, std::memory_order_relaxed)) {
  }
}

// Queues `duration` of work on a stream whose work completes at `done`, after the later of `now`
// (the context's engine clock) and `also_after` (work the stream must wait for, e.g. the legacy
// default stream). Returns the new completion time.
inline std::uint64_t Enqueue(std::atomic<std::uint64_t>& done, std::uint64_t now,
                             std::uint64_t also_after, std::uint64_t duration) {
  std::uint64_t previous = done.load(std::memory_order_relaxed);
  std::uint64_t end;
  do {
    std::uint64_t start = now > previous ? now : previous;
    if (also_after > start) start = also_after;
    end = start + duration;
  } while (!done.compare_exchange_weak(previous, end, std::memory_order_relaxed));
  return end;
}

// Blocks the calling thread until CLOCK_MONOTONIC reaches `deadline_ns`: sleeps for the bulk of
// a long wait and yields for the last stretch, where sleeping would overshoot.
void WaitUntil(std::uint64_t deadline_ns);

}  // namespace gpufrac::simgpu
