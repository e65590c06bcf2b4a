// What both replays of a trace (the FGD protocol and --timed) set up before placing pods: the
// cluster from the node list, the trace's requests, the typical workload they define, and a
// scheduler with the chosen policy and a random ranking of the nodes.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/random.h"
#include "common/status.h"
#include "placement/cluster.h"
#include "placement/policy.h"
#include "placement/request.h"
#include "placement/scheduler.h"
#include "placement/typical_workload.h"
#include "sim/openb_trace.h"

namespace gpufrac::sim {

class Replay {
 public:
  // Errors (kInvalidArgument): a node list without GPUs, or one the cluster model rejects.
  // Heap-allocated because the policy and scheduler keep pointers into it.
  static StatusOr<std::unique_ptr<Replay>> Create(const NodeList& nodes, const PodList& pods);

  // Draws the node ranking, then the policy's own seed, from `random` and makes the scheduler.
  // Error (kInvalidArgument): an unknown policy.
  Status Start(const std::string& policy, Random& random);

  placement::Cluster& cluster() { return cluster_; }
  // The trace's requests, in file order.
  const std::vector<placement::Request>& requests() const { return requests_; }
  // Valid after Start.
  placement::Scheduler& scheduler() { return *scheduler_; }

 private:
  explicit Replay(placement::Cluster cluster) : cluster_(std::move(cluster)) {}

  placement::Cluster cluster_;
  std::vector<placement::Request> requests_;
  placement::TypicalWorkload typical_;
  std::unique_ptr<placement::Policy> policy_;
  std::unique_ptr<placement::Scheduler> scheduler_;
};

}  // namespace gpufrac::sim
