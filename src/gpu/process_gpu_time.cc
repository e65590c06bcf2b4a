// Adding up NVML's per-process utilisation samples (see process_gpu_time.h).
#include "gpu/process_gpu_time.h"

#include <time.h>

#include <algorithm>

namespace gpufrac::gpu {
namespace {

// A process with no sample for this long is forgotten (it ended, or went idle: its next sample
// counts as its first).
constexpr unsigned long long kForgetUs = 10'000'000;
// The most time one sample is taken to cover (a poll that came this late loses the rest).
constexpr unsigned long long kMaxCoverUs = 1'000'000;

unsigned long long RealtimeUs() {
  timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  return static_cast<unsigned long long>(now.tv_sec) * 1'000'000 +
         static_cast<unsigned long long>(now.tv_nsec) / 1000;
}

}  // namespace

StatusOr<std::unique_ptr<GpuTimeMeter>> GpuTimeMeter::Open(const std::string& library,
                                                           const std::vector<int>& indices) {
  std::unique_ptr<GpuTimeMeter> meter(new GpuTimeMeter());
  GPUFRAC_ASSIGN_OR_RETURN(meter->nvml_,
                           NvmlSession::Open(library, "measuring each process's GPU time"));
  abi::nvmlDeviceGetHandleByIndex_v2_t get_handle = nullptr;
  GPUFRAC_RETURN_IF_ERROR(meter->nvml_->Resolve("nvmlDeviceGetHandleByIndex_v2", &get_handle));
  GPUFRAC_RETURN_IF_ERROR(
      meter->nvml_->Resolve("nvmlDeviceGetProcessUtilization", &meter->get_samples_));
  for (int index : indices) {
    Gpu gpu;
    gpu.index = index;
    if (abi::nvmlReturn_t rc = get_handle(static_cast<unsigned int>(index), &gpu.handle);
        rc != abi::NVML_SUCCESS) {
      return meter->nvml_->CallError(rc, "nvmlDeviceGetHandleByIndex_v2(GPU " +
                                             std::to_string(index) + ")");
    }
    meter->gpus_.push_back(std::move(gpu));
  }
  return meter;
}

std::vector<GpuTimeMeter::Use> GpuTimeMeter::Poll() {
  std::vector<Use> uses;
  for (Gpu& gpu : gpus_) {
    unsigned int count = static_cast<unsigned int>(buffer_.size());
    abi::nvmlReturn_t rc = abi::NVML_ERROR_INSUFFICIENT_SIZE;
    // The count can grow between the calls (a process started): ask again, a few times.
    for (int attempt = 0; attempt < 3 && rc == abi::NVML_ERROR_INSUFFICIENT_SIZE; ++attempt) {
      if (count > buffer_.size()) buffer_.resize(count);
      count = static_cast<unsigned int>(buffer_.size());
      rc = get_samples_(gpu.handle, buffer_.empty() ? nullptr : buffer_.data(), &count,
                        gpu.last_seen_us);
    }
    gpu.measured = rc != abi::NVML_ERROR_NOT_SUPPORTED;
    if (rc == abi::NVML_ERROR_NOT_FOUND) {
      // No sample newer than the last: the period is not over yet, or nobody had work in it.
      const unsigned long long now_us = RealtimeUs();
      if (now_us > gpu.last_seen_us + 2 * gpu.period_us) {
        gpu.counted_until_us = std::max(gpu.counted_until_us, now_us - gpu.period_us);
      }
    }
    if (rc != abi::NVML_SUCCESS) continue;  // none newer (NOT_FOUND), or nothing to count
    const unsigned long long since_us = gpu.last_seen_us;
    for (unsigned int i = 0; i < count; ++i) {
      const abi::nvmlProcessUtilizationSample_t& s = buffer_[i];
      const auto pid = static_cast<pid_t>(s.pid);
      auto [last, first] = gpu.last_stamp_us.try_emplace(pid, 0);
      uint64_t cover_us = gpu.period_us;
      if (!first && s.timeStamp > last->second) {
        gpu.period_us = std::min<uint64_t>(gpu.period_us, s.timeStamp - last->second);
        const unsigned long long from = std::max(since_us, last->second);
        cover_us = s.timeStamp > from ? std::min(s.timeStamp - from, kMaxCoverUs) : 0;
      } else if (!first) {
        cover_us = 0;  // a sample already counted
      }
      last->second = std::max(last->second, s.timeStamp);
      gpu.last_seen_us = std::max(gpu.last_seen_us, s.timeStamp);
      const uint64_t ns = uint64_t{std::min(s.smUtil, 100u)} * cover_us * 10;  // % of µs
      if (ns > 0) uses.push_back({.gpu = gpu.index, .pid = pid, .ns = ns});
    }
    gpu.counted_until_us = std::max(gpu.counted_until_us, gpu.last_seen_us);
    std::erase_if(gpu.last_stamp_us,
                  [&](const auto& entry) { return entry.second + kForgetUs < gpu.last_seen_us; });
  }
  return uses;
}

std::vector<std::pair<int, unsigned long long>> GpuTimeMeter::CountedUntilUs() const {
  std::vector<std::pair<int, unsigned long long>> out;
  for (const Gpu& g : gpus_) out.emplace_back(g.index, g.counted_until_us);
  return out;
}

std::vector<int> GpuTimeMeter::Unmeasured() const {
  std::vector<int> out;
  for (const Gpu& g : gpus_) {
    if (!g.measured) out.push_back(g.index);
  }
  return out;
}

}  // namespace gpufrac::gpu
