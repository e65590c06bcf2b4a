// Adding up this process's NVML utilisation samples (see own_gpu_time.h).
#include "limiter/own_gpu_time.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "limiter/runtime.h"

namespace gpufrac::limiter {

bool OwnGpuTime::Open(const char* uuid) {
  if (strncmp(uuid, "MIG-", 4) == 0 || Real_nvmlInit_v2()() != abi::NVML_SUCCESS) return false;
  open_ = Real_nvmlDeviceGetHandleByUUID()(uuid, &device_) == abi::NVML_SUCCESS;
  return open_;
}

void OwnGpuTime::ForkedChild() {
  pthread_mutex_init(&lock_, nullptr);
  next_poll_ns_.store(0, std::memory_order_relaxed);
  last_seen_us_ = own_last_us_ = 0;
  last_poll_ns_ = 0;
}

GpuTimeSource::Measured OwnGpuTime::Take(uint64_t now_ns, uint64_t* ns) {
  if (!open_ || now_ns < next_poll_ns_.load(std::memory_order_relaxed) ||
      pthread_mutex_trylock(&lock_) != 0) {
    return Measured::kNothing;
  }
  Measured measured = Measured::kNothing;
  if (now_ns >= next_poll_ns_.load(std::memory_order_relaxed)) {
    next_poll_ns_.store(now_ns + kPollNs, std::memory_order_relaxed);
    // Polled within a period of the last poll, it misses no sample: what it finds is all of this
    // process's GPU time since. Later (the process went without turns, alone on the GPU, or was
    // stopped), periods may have gone (the driver keeps a few; the simulator, one): it only
    // starts counting again.
    const bool timely = last_poll_ns_ != 0 && now_ns - last_poll_ns_ <= Period() * 1000;
    last_poll_ns_ = now_ns;
    unsigned int count = kSamples;
    const abi::nvmlReturn_t rc =
        Real_nvmlDeviceGetProcessUtilization()(device_, samples_, &count, last_seen_us_);
    // More processes than fit: the newest sample of this process may be among those left out,
    // and the next poll finds it. More samples than fit (the driver's history, on a first poll):
    // the next asks only for the last period's, and starts counting again.
    if (rc == abi::NVML_ERROR_INSUFFICIENT_SIZE) {
      timespec real;
      clock_gettime(CLOCK_REALTIME, &real);
      const auto real_us = static_cast<unsigned long long>(real.tv_sec) * 1'000'000 +
                           static_cast<unsigned long long>(real.tv_nsec) / 1000;
      last_seen_us_ = std::max(last_seen_us_, real_us - Period());
      last_poll_ns_ = 0;
    }
    if (rc == abi::NVML_SUCCESS && count > 0) {
      const bool shown_before = own_last_us_ != 0;
      const unsigned long long since_us = last_seen_us_;
      const auto self = static_cast<unsigned int>(getpid());
      uint64_t total = 0;
      for (unsigned int i = 0; i < count && i < kSamples; ++i) {
        const abi::nvmlProcessUtilizationSample_t& s = samples_[i];
        last_seen_us_ = std::max(last_seen_us_, s.timeStamp);
        if (s.pid != self || s.timeStamp <= own_last_us_) continue;
        if (own_last_us_ != 0) {
          const unsigned long long gap = s.timeStamp - own_last_us_;
          period_us_ = period_us_ == 0 ? gap : std::min(period_us_, gap);
        }
        unsigned long long cover_us = Period();
        if (own_last_us_ != 0) {
          cover_us = std::min(s.timeStamp - std::max(since_us, own_last_us_), cover_us);
        }
        own_last_us_ = s.timeStamp;
        total += uint64_t{std::min(s.smUtil, 100u)} * cover_us * 10;  // percent of µs, in ns
      }
      // Until the driver has shown this process once, its samples may be under another pid (a
      // container's namespace): nothing is measured.
      if (own_last_us_ != 0) {
        measured = timely && shown_before ? Measured::kTime : Measured::kBaseline;
        *ns = total;
      }
    }
  }
  pthread_mutex_unlock(&lock_);
  return measured;
}

}  // namespace gpufrac::limiter
