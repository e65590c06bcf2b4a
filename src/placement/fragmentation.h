// FGD's measure of GPU fragmentation (Weng et al., "Beware of Fragmentation", ATC 2023): the free
// GPU thousandths of a node that a request of the typical workload could not use, averaged over
// the typical workload by popularity. For one class: all free GPU share when the class cannot run
// on the node at all (CPU short, model not allowed, too few GPUs with enough free share, or a
// CPU-only class); otherwise the free share of the GPUs too small for it. Memory is not counted.
#pragma once

#include <vector>

#include "placement/cluster.h"
#include "placement/typical_workload.h"

namespace gpufrac::placement {

// A node's fragmentation, prepared so that the fragmentation after a hypothetical placement costs
// O(classes · GPUs changed) instead of a full recount.
class FragmentationView {
 public:
  FragmentationView(const Node& n, const TypicalWorkload& w);

  // The node's fragmentation now, in GPU thousandths.
  double Current() const { return current_; }

  // The fragmentation after the node gives `cpu_milli` of CPU and `milli_each` of each GPU in
  // `gpus` to a request (which must fit).
  double After(uint64_t cpu_milli, GpuSet gpus, uint32_t milli_each) const;

 private:
  struct ClassState {
    int gpus_big_enough;  // GPUs with at least the class's share free.
    uint64_t small_free;  // Free share on the other GPUs.
  };
  double ClassFragment(const WorkloadClass& c, uint64_t cpu_free, uint64_t total_free,
                       int gpus_big_enough, uint64_t small_free) const;

  const Node& node_;
  const TypicalWorkload& workload_;
  uint64_t total_free_ = 0;
  std::vector<ClassState> classes_;
  double current_ = 0;
};

// FragmentationView(n, w).Current().
double NodeFragmentation(const Node& n, const TypicalWorkload& w);

// FGD's node score for a fragmentation reduction (before - after, GPU thousandths):
// floor(100 * sigmoid(reduction / 1000)), a whole number in 0..100. One point is about 40
// thousandths near zero, so nodes with nearly equal reductions tie.
double FgdScore(double reduction);

}  // namespace gpufrac::placement
