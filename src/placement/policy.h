// The interface every placement policy implements: a score for each node a request fits, and
// the choice of GPUs on the node that wins. The scheduler (scheduler.h) does the rest.
#pragma once

#include <string_view>

#include "placement/cluster.h"
#include "placement/request.h"

namespace gpufrac::placement {

class Policy {
 public:
  virtual ~Policy() = default;

  // The name users pass to --policy.
  virtual std::string_view name() const = 0;

  // How good node n is for r, higher is better; only called when Fits(n, r). Nodes with equal
  // scores tie, and the scheduler's tie-break ranking decides between them. Unless
  // volatile_scores(), the score must depend only on n's state and r (and on what the policy was
  // built with), because the scheduler reuses it until n changes.
  virtual double Score(const Node& n, const Request& r) = 0;

  // The GPUs of n that r gets; only called when Fits(n, r). The result must satisfy
  // PlacementFits(n, r, result); it is empty for CPU-only requests.
  virtual GpuSet ChooseGpus(const Node& n, const Request& r) = 0;

  // True when Score is not a function of the node's state (e.g. random scores): nothing is
  // cached and every node is scored for every request.
  virtual bool volatile_scores() const { return false; }
};

// For policies that work out a node's score and its GPUs together (e.g. by trying each GPU):
// they implement Best, and Score and ChooseGpus both come from it.
class ChoicePolicy : public Policy {
 public:
  double Score(const Node& n, const Request& r) final { return Best(n, r).score; }
  GpuSet ChooseGpus(const Node& n, const Request& r) final { return Best(n, r).gpus; }

 protected:
  struct Choice {
    double score;
    GpuSet gpus;
  };
  virtual Choice Best(const Node& n, const Request& r) const = 0;
};

}  // namespace gpufrac::placement
