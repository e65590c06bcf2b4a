// Waiting for simulated GPU work to complete.
#include "simgpu/core/sim_time.h"

#include <sched.h>

namespace gpufrac::simgpu {

void WaitUntil(std::uint64_t deadline_ns) {
  constexpr std::uint64_t kSpinNs = 100000;  // typical timer slack and wake-up latency
  while (true) {
    const std::uint64_t now = NowNs();
    if (now >= deadline_ns) return;
    const std::uint64_t remaining = deadline_ns - now;
    if (remaining > kSpinNs) {
      const std::uint64_t wake = deadline_ns - kSpinNs;
      timespec until{.tv_sec = static_cast<time_t>(wake / 1000000000u),
                     .tv_nsec = static_cast<long>(wake % 1000000000u)};
      ::clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, nullptr);
    } else {
      ::sched_yield();
    }
  }
}

}  // namespace gpufrac::simgpu
