// Counting the workload mix and rebuilding the policy from it (see workload_mix.h).
#include "placement/workload_mix.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "placement/policies.h"

namespace gpufrac::placement {
namespace {

// The mix is sampled down to about this many requests, in proportion to the counts, so that a
// rebuild costs the same with a hundred or a hundred thousand requests counted.
constexpr double kSamples = 1000;
// Rebuilt after this many changes (or an eighth of the requests it was built from, if more).
constexpr int64_t kRebuildChanges = 64;

}  // namespace

StatusOr<PolicyWithMix> PolicyWithMix::Create(std::string_view name, const Cluster* cluster) {
  const PolicyInfo* info = FindPolicy(name);
  PolicyWithMix p;
  p.name_ = std::string(name);
  p.needs_mix_ = info != nullptr && info->needs_typical;
  p.typical_ = std::make_unique<TypicalWorkload>();
  GPUFRAC_ASSIGN_OR_RETURN(
      p.policy_, MakePolicy(name, {.typical = p.typical_.get(), .seed = 0, .cluster = cluster}));
  p.built_ms_ = INT64_MIN;  // Not built from a mix yet: the first Refresh does.
  return p;
}

void PolicyWithMix::Count(const Request& r, int64_t delta) {
  auto it = counts_.try_emplace(Kind{r.cpu_milli, r.gpu_milli, r.gpu_count, r.models}, 0).first;
  it->second += delta;
  if (it->second <= 0) counts_.erase(it);
}

bool PolicyWithMix::Refresh(int64_t now_ms, const Cluster* cluster, bool force,
                            int64_t max_age_ms) {
  if (!force) {
    if (!needs_mix_) return false;
    const bool never = built_ms_ == INT64_MIN;
    const bool moved = changes_ >= std::max(kRebuildChanges, built_size_ / 8);
    const bool old = changes_ > 0 && !never && now_ms - built_ms_ >= max_age_ms;
    if (!never && !moved && !old) return false;
  }
  int64_t total = 0;
  for (const auto& [kind, count] : counts_) total += count;
  const double scale = total > kSamples ? kSamples / static_cast<double>(total) : 1.0;
  std::vector<Request> sample;
  for (const auto& [kind, count] : counts_) {
    Request r;
    std::tie(r.cpu_milli, r.gpu_milli, r.gpu_count, r.models) = kind;
    int64_t copies = std::max<int64_t>(1, std::llround(static_cast<double>(count) * scale));
    sample.insert(sample.end(), static_cast<size_t>(copies), r);
  }
  auto next = std::make_unique<TypicalWorkload>(TypicalWorkload::FromRequests(sample));
  StatusOr<std::unique_ptr<Policy>> made =
      MakePolicy(name_, {.typical = next.get(), .seed = 0, .cluster = cluster});
  if (!made.ok()) return false;  // The name was checked by Create.
  // The old policy refers to the old workload: replace it first.
  policy_ = std::move(*made);
  typical_ = std::move(next);
  changes_ = 0;
  built_size_ = total;
  built_ms_ = now_ms;
  return true;
}

}  // namespace gpufrac::placement
