// NvmlMigBackend (see nvml_backend.h).
#include "mig/nvml_backend.h"

namespace gpufrac::mig {

NvmlMigBackend::NvmlMigBackend(const gpu::MigControl* control,
                               std::map<int, const gpu::MigModel*> models)
    : control_(control), models_(std::move(models)) {}

StatusOr<const gpu::MigModel*> NvmlMigBackend::Model(int gpu) const {
  auto it = models_.find(gpu);
  if (it == models_.end()) return NotFoundError("GPU " + std::to_string(gpu) + " has no MIG");
  return it->second;
}

StatusOr<std::vector<MigBackend::InstanceInfo>> NvmlMigBackend::List(int gpu) {
  GPUFRAC_ASSIGN_OR_RETURN(const gpu::MigModel* model, Model(gpu));
  GPUFRAC_ASSIGN_OR_RETURN(auto instances, control_->ListInstances(static_cast<unsigned>(gpu)));
  std::vector<InstanceInfo> out;
  for (const gpu::MigInstance& i : instances) {
    int profile = -1;
    for (int p = 0; p < model->profile_count; ++p) {
      if (model->profiles[p].profile_id == i.profile_id) profile = p;
    }
    if (profile < 0) {
      return InternalError("GPU " + std::to_string(gpu) + " has an instance of profile id " +
                           std::to_string(i.profile_id) + ", which gpufrac's catalogue lacks");
    }
    out.push_back({.gi_id = i.gi_id,
                   .profile = profile,
                   .placement = i.placement,
                   .uuid = i.uuid,
                   .in_use = !i.pids.empty(),
                   .pids = i.pids});
  }
  return out;
}

StatusOr<MigBackend::InstanceInfo> NvmlMigBackend::Create(int gpu, int profile,
                                                          gpu::MigPlacement placement) {
  GPUFRAC_ASSIGN_OR_RETURN(const gpu::MigModel* model, Model(gpu));
  if (profile < 0 || profile >= model->profile_count) {
    return InvalidArgumentError("no profile number " + std::to_string(profile));
  }
  GPUFRAC_ASSIGN_OR_RETURN(
      gpu::MigInstance made,
      control_->CreateInstance(static_cast<unsigned>(gpu), model->profiles[profile].profile_id,
                               placement));
  return InstanceInfo{.gi_id = made.gi_id,
                      .profile = profile,
                      .placement = made.placement,
                      .uuid = made.uuid,
                      .in_use = !made.pids.empty(),
                      .pids = made.pids};
}

Status NvmlMigBackend::Destroy(int gpu, unsigned gi_id) {
  return control_->DestroyInstance(static_cast<unsigned>(gpu), gi_id);
}

StatusOr<bool> NvmlMigBackend::SetMode(int gpu, bool enabled) {
  GPUFRAC_ASSIGN_OR_RETURN(gpu::MigModeChange change,
                           control_->SetMigMode(static_cast<unsigned>(gpu), enabled));
  if (change.mode.current == enabled) return false;
  if (change.reset_required) return true;
  // Blocked by processes gpufrac does not know about: take the request back, so that a later
  // reset does not switch the GPU unexpectedly, and refuse.
  if (change.mode.pending == enabled) {
    (void)control_->SetMigMode(static_cast<unsigned>(gpu), !enabled);
  }
  return FailedPreconditionError("GPU " + std::to_string(gpu) + ": " + change.reason);
}

}  // namespace gpufrac::mig
