// Replay set-up. The typical workload is the trace as given (before any shuffling or
// resampling), as in the FGD paper.
#include "sim/replay.h"

#include "placement/policies.h"

namespace gpufrac::sim {

StatusOr<std::unique_ptr<Replay>> Replay::Create(const NodeList& nodes, const PodList& pods) {
  GPUFRAC_ASSIGN_OR_RETURN(placement::Cluster cluster,
                           placement::Cluster::Create(nodes.models, nodes.nodes));
  if (cluster.GpuMilliCapacity() == 0) return InvalidArgumentError("the node list has no GPUs");
  std::unique_ptr<Replay> replay(new Replay(std::move(cluster)));
  replay->requests_.reserve(pods.pods.size());
  for (const TracePod& p : pods.pods) replay->requests_.push_back(p.request);
  replay->typical_ = placement::TypicalWorkload::FromRequests(replay->requests_);
  return replay;
}

Status Replay::Start(const std::string& policy, Random& random) {
  std::vector<int> rank = random.Permutation(cluster_.size());
  placement::PolicyOptions options{&typical_, random.Next(), &cluster_};
  GPUFRAC_ASSIGN_OR_RETURN(policy_, placement::MakePolicy(policy, options));
  scheduler_ = std::make_unique<placement::Scheduler>(&cluster_, policy_.get(), std::move(rank));
  return OkStatus();
}

}  // namespace gpufrac::sim
