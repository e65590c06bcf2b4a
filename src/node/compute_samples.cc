#include "node/compute_samples.h"

namespace gpufrac::node {

std::optional<double> ComputeSamples::Share(int64_t job, int gpu, uint64_t ns, int64_t now_ms,
                                            Source source) {
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, added] = samples_.try_emplace({job, gpu});
  Sample& s = it->second;
  // New, another source, or a counter that went back (a new arbiter segment).
  if (added || s.source != source || ns < s.base_ns || now_ms < s.base_ms) {
    s = Sample{ns, now_ms, std::nullopt, source};
    return std::nullopt;
  }
  if (now_ms - s.base_ms >= kIntervalMs) {
    s.share = static_cast<double>(ns - s.base_ns) / 1e6 / static_cast<double>(now_ms - s.base_ms);
    s.base_ns = ns;
    s.base_ms = now_ms;
  }
  return s.share;
}

void ComputeSamples::KeepOnly(const std::set<int64_t>& live) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = samples_.begin(); it != samples_.end();) {
    it = live.count(it->first.first) ? std::next(it) : samples_.erase(it);
  }
}

}  // namespace gpufrac::node
