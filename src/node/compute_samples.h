// Each workload's share of a GPU's time over the last interval, from a running total of its GPU
// time (as the driver measured it, or as its arbiter charged it), sampled whenever status or
// metrics are read.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <utility>

namespace gpufrac::node {

class ComputeSamples {
 public:
  // The shortest interval a share is measured over.
  static constexpr int64_t kIntervalMs = 1000;

  // Where a running total comes from: the driver's measure, or the arbiter's charges. A job's
  // total switches from one to the other when its cgroup is found: the interval starts again.
  enum class Source { kMeasured, kCharged };
  // Records that `job` has used `ns` on GPU `gpu` by `now_ms` (a steady clock), by `source`.
  // Returns its share over the interval since the sample at least kIntervalMs older, or the share
  // last measured when the previous sample is younger; nullopt before there are two samples.
  std::optional<double> Share(int64_t job, int gpu, uint64_t ns, int64_t now_ms, Source source);
  // Forgets jobs other than `live` (ended jobs).
  void KeepOnly(const std::set<int64_t>& live);

 private:
  struct Sample {
    uint64_t base_ns = 0;
    int64_t base_ms = 0;
    std::optional<double> share;
    Source source = Source::kMeasured;
  };
  std::mutex mu_;
  std::map<std::pair<int64_t, int>, Sample> samples_;
};

}  // namespace gpufrac::node
