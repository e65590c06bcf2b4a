// The node service's Prometheus metrics: the families gpufracd exports, the events that move its
// counters and histograms, and the exposition of a snapshot of GPUs and queues. Thread-safe.
#pragma once

#include <mutex>
#include <string>
#include <vector>

#include "common/metrics.h"
#include "node/gpu_status.h"
#include "node/job.h"
#include "node/queue_scheduler.h"

namespace gpufrac::node {

class NodeMetrics {
 public:
  NodeMetrics();  // Declares every family.

  void JobSubmitted();
  void JobStarted(double waited_seconds);
  void JobFinished(JobState state);
  void SchedulingPass(double seconds);

  // The exposition, with the gauges set from `gpus` and `queues`.
  std::string Render(const std::vector<GpuStatus>& gpus,
                     const std::vector<QueueScheduler::QueueView>& queues);

 private:
  Metrics metrics_;
  std::mutex render_mu_;  // Concurrent scrapes must not interleave their Clear and Set.
};

}  // namespace gpufrac::node
