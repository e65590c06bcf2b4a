// Building the typical workload from observed requests.
#include "placement/typical_workload.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace gpufrac::placement {

TypicalWorkload TypicalWorkload::FromRequests(const std::vector<Request>& requests,
                                              double coverage) {
  using Kind = std::tuple<uint64_t, uint32_t, uint32_t, ModelSet>;  // cpu, milli, count, models
  std::map<Kind, size_t> counts;
  for (const Request& r : requests) ++counts[Kind{r.cpu_milli, r.gpu_milli, r.gpu_count, r.models}];
  std::vector<std::pair<Kind, size_t>> kinds(counts.begin(), counts.end());
  std::stable_sort(kinds.begin(), kinds.end(), [](const auto& a, const auto& b) {
    if (a.second != b.second) return a.second > b.second;
    return a.first > b.first;
  });

  TypicalWorkload w;
  double total = static_cast<double>(requests.size());
  size_t covered = 0;
  for (const auto& [kind, count] : kinds) {
    if (static_cast<double>(covered) >= coverage * total) break;
    covered += count;
    Request r;
    std::tie(r.cpu_milli, r.gpu_milli, r.gpu_count, r.models) = kind;
    w.classes_.push_back({r, static_cast<double>(count)});
  }
  for (WorkloadClass& c : w.classes_) c.popularity /= static_cast<double>(covered);
  return w;
}

}  // namespace gpufrac::placement
