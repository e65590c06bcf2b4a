// Decayed per-profile request counts.
#include "mig/demand.h"

#include <cmath>

namespace gpufrac::mig {

DemandTracker::DemandTracker(double half_life) : decay_(std::exp2(-1.0 / half_life)) {}

ProfileDemand& DemandTracker::For(const gpu::MigModel& model) {
  for (ProfileDemand& d : demand_) {
    if (d.model == &model) return d;
  }
  demand_.push_back({.model = &model, .weight = {}});
  return demand_.back();
}

void DemandTracker::Observe(const gpu::MigModel& model, int profile) {
  if (profile < 0 || profile >= model.profile_count) return;
  ProfileDemand& d = For(model);
  for (double& w : d.weight) w *= decay_;
  d.weight[profile] += 1;
}

void DemandTracker::Observe(const GpuRequest& request,
                            const std::vector<const gpu::MigModel*>& models) {
  for (const gpu::MigModel* model : models) {
    if (model == nullptr) continue;
    StatusOr<const gpu::MigProfile*> p = SmallestProfile(*model, request);
    if (p.ok()) Observe(*model, static_cast<int>(*p - model->profiles));
  }
}

}  // namespace gpufrac::mig
