// The fragmentation measure, kept per class as (GPUs big enough, free share on the rest) so that
// a hypothetical change to a few GPUs updates each class in O(1) per GPU.
#include "placement/fragmentation.h"

#include <cmath>

namespace gpufrac::placement {

FragmentationView::FragmentationView(const Node& n, const TypicalWorkload& w)
    : node_(n), workload_(w) {
  total_free_ = n.FreeGpuMilli();
  classes_.reserve(w.classes().size());
  for (const WorkloadClass& c : w.classes()) {
    ClassState s{0, 0};
    for (int g = 0; g < n.spec.gpu_count; ++g) {
      uint32_t free = n.gpu_free_milli[g];
      if (free >= c.request.gpu_milli) {
        ++s.gpus_big_enough;
      } else {
        s.small_free += free;
      }
    }
    classes_.push_back(s);
    current_ +=
        c.popularity * ClassFragment(c, n.cpu_free, total_free_, s.gpus_big_enough, s.small_free);
  }
}

double FragmentationView::ClassFragment(const WorkloadClass& c, uint64_t cpu_free,
                                        uint64_t total_free, int gpus_big_enough,
                                        uint64_t small_free) const {
  const Request& r = c.request;
  bool runs = r.gpu_count > 0 && cpu_free >= r.cpu_milli &&
              (r.models == 0 || (node_.spec.gpu_count > 0 && (r.models >> node_.spec.model & 1))) &&
              gpus_big_enough >= static_cast<int>(r.gpu_count);
  return static_cast<double>(runs ? small_free : total_free);
}

double FragmentationView::After(uint64_t cpu_milli, GpuSet gpus, uint32_t milli_each) const {
  uint64_t cpu_free = node_.cpu_free - cpu_milli;
  int changed = 0;
  uint32_t before[kMaxGpusPerNode];
  for (int g = 0; g < node_.spec.gpu_count; ++g) {
    if (gpus >> g & 1) before[changed++] = node_.gpu_free_milli[g];
  }
  uint64_t total_free = total_free_ - uint64_t{milli_each} * changed;
  double fragment = 0;
  for (size_t i = 0; i < classes_.size(); ++i) {
    const WorkloadClass& c = workload_.classes()[i];
    uint32_t need = c.request.gpu_milli;
    int big = classes_[i].gpus_big_enough;
    uint64_t small = classes_[i].small_free;
    for (int k = 0; k < changed; ++k) {
      uint32_t old_free = before[k], new_free = before[k] - milli_each;
      if (old_free >= need) {
        --big;
      } else {
        small -= old_free;
      }
      if (new_free >= need) {
        ++big;
      } else {
        small += new_free;
      }
    }
    fragment += c.popularity * ClassFragment(c, cpu_free, total_free, big, small);
  }
  return fragment;
}

double NodeFragmentation(const Node& n, const TypicalWorkload& w) {
  return FragmentationView(n, w).Current();
}

double FgdScore(double reduction) {
  double sigmoid = 1 / (1 + std::exp(-reduction / 1000));
  return std::floor(sigmoid * 100);
}

}  // namespace gpufrac::placement
