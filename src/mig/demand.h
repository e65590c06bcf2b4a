// Recent demand for MIG profiles, per GPU model, as the planner's ProfileDemand: every request
// counts once for the smallest profile that holds it on each model, and older requests fade
// with a half-life counted in requests, so the weights follow a changing mix.
#pragma once

#include <vector>

#include "common/gpu_request.h"
#include "gpu/mig_catalogue.h"
#include "mig/planner.h"

namespace gpufrac::mig {

class DemandTracker {
 public:
  // `half_life` requests (> 0) halve the weight of what came before them.
  explicit DemandTracker(double half_life = 1000);

  // Counts `request` on each model in `models` that can hold it (others are skipped).
  void Observe(const GpuRequest& request, const std::vector<const gpu::MigModel*>& models);
  // Counts one request for profile index `profile` of `model`.
  void Observe(const gpu::MigModel& model, int profile);

  // For PlanRequest; empty before the first request.
  const std::vector<ProfileDemand>& demand() const { return demand_; }

 private:
  ProfileDemand& For(const gpu::MigModel& model);
  double decay_;
  std::vector<ProfileDemand> demand_;
};

}  // namespace gpufrac::mig
