// The FGD paper's evaluation protocol on the openb trace, one seed at a time:
//   1. shuffle the trace's pods;
//   2. append pods drawn at random, with replacement, from the trace until the next one would
//      take the total GPU request past `load` x cluster capacity (or remove random pods while the
//      trace exceeds it);
//   3. draw a random ranking of the nodes (ties between equal scores go to the lowest rank);
//   4. place the pods strictly one at a time with the policy; a pod that fits nowhere is dropped
//      and never retried; nothing departs.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "common/status.h"
#include "placement/policies.h"
#include "sim/allocation_curve.h"
#include "sim/openb_trace.h"

namespace gpufrac::sim {

struct OpenbRunOptions {
  std::string policy = std::string(placement::kDefaultPolicy);
  uint64_t seed = 42;
  // Total GPU request resampled up (or down) to, as a multiple of capacity; 0 keeps the pods as
  // they are (shuffled only).
  double load = 1.3;
};

struct OpenbRunResult {
  std::string policy;
  uint64_t seed = 0;
  AllocationCurve curve;
  // 100 - the curve at 100% arrived: the headline figure. NaN when demand never got near 100%.
  double unallocated_gpu_pct_at_100 = 0;
  double allocated_pct_final = 0;  // Allocated GPU share at the end, % of capacity.
  double arrived_pct_final = 0;    // GPU demand that arrived, % of capacity.
  uint64_t pods_total = 0;
  uint64_t pods_failed = 0;
  uint64_t gpu_pods_failed = 0;  // Failed pods that asked for GPUs.
  double elapsed_s = 0;          // Placement time (the loop of step 4) in seconds.
};

// Called now and then with (pods placed so far, pods in all) while a run goes on.
using ProgressFn = std::function<void(uint64_t done, uint64_t total)>;

// Runs one seed. Errors (kInvalidArgument): an unknown policy, a node list without GPUs or that
// the cluster model rejects, pods without GPU demand when load > 0. Resampling stops at 50
// million pods.
StatusOr<OpenbRunResult> RunOpenb(const NodeList& nodes, const PodList& pods,
                                  const OpenbRunOptions& options,
                                  const ProgressFn& progress = nullptr);

}  // namespace gpufrac::sim
