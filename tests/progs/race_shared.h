// Shared memory layout for the allocation race between cuda_probe processes: a barrier releases
// all of them at once each round, and counters record what they held together.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstdint>

namespace gpufrac::testing {

constexpr int kMaxRaceRounds = 1000;

struct RaceShared {
  pthread_barrier_t barrier;
  std::atomic<int64_t> live_bytes;      // allocations held right now (counted after success)
  std::atomic<int64_t> max_live_bytes;  // the most ever held at once
  std::atomic<int32_t> successes[kMaxRaceRounds];
};

}  // namespace gpufrac::testing
