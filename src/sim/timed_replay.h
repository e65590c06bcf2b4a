// Replay of a trace in time (`gpufrac sim openb --timed`): pods arrive at their creation_time and
// run for deletion_time - creation_time once placed; a pod that fits nowhere waits in a queue and
// is retried, in arrival order, whenever a departure frees capacity (a later pod may start ahead
// of an earlier one that still does not fit). Reports waiting times and the time-averaged
// allocation. `speedup` divides the arrival times (runtimes stay as they are), to replay the same
// pods at a higher arrival rate: openb's pods are short next to the trace's span, so at speedup 1
// the cluster is nearly idle.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "sim/openb_protocol.h"
#include "sim/openb_trace.h"

namespace gpufrac::sim {

struct TimedRunResult {
  std::string policy;
  uint64_t seed = 0;  // Drives the tie-break ranking of the nodes (and random's choices).
  uint64_t pods_total = 0;
  uint64_t pods_placed = 0;
  uint64_t pods_waited = 0;        // Placed, but not at arrival.
  uint64_t pods_never_placed = 0;  // Still queued when the trace ended.
  double mean_wait_s = 0;          // Over placed pods (0 for those placed at arrival).
  double p99_wait_s = 0;
  uint64_t max_queue = 0;  // Longest the queue got, in pods.
  // GPU share allocated, averaged from the first to the last arrival; NaN when they coincide.
  double time_avg_allocated_pct = 0;
  double elapsed_s = 0;  // Wall time of the replay.
};

// Errors (kInvalidArgument): the pod list has no creation_time/deletion_time columns, times too
// large for the speedup, an unknown policy, or a node list without GPUs or that the cluster model
// rejects.
StatusOr<TimedRunResult> RunTimed(const NodeList& nodes, const PodList& pods,
                                  const std::string& policy, uint64_t seed, double speedup = 1,
                                  const ProgressFn& progress = nullptr);

}  // namespace gpufrac::sim
