#include "node/mig_hardware.h"

#include <utility>

#include "machine/mig_targets.h"
#include "mig/apply.h"

namespace gpufrac::node {

MigHardware::MigHardware(mig::MigBackend* backend, std::map<int, const gpu::MigModel*> models)
    : backend_(backend), models_(std::move(models)) {}

const gpu::MigModel* MigHardware::ModelOf(const machine::NodeGpu& gpu) const {
  return machine::MigTablesOf(gpu, models_);
}

Status MigHardware::CheckDrives(const machine::NodeGpu& gpu) const {
  if (!ModelOf(gpu)) {
    return FailedPreconditionError("GPU " + std::to_string(gpu.index) + " (" +
                                   (gpu.model.empty() ? "unknown model" : gpu.model) +
                                   ") has no MIG");
  }
  if (!backend_) return UnavailableError("MIG control is not available here");
  return OkStatus();
}

StatusOr<bool> MigHardware::SetMode(const machine::NodeGpu& gpu, bool enabled) {
  GPUFRAC_RETURN_IF_ERROR(CheckDrives(gpu));
  if (!enabled) {
    GPUFRAC_ASSIGN_OR_RETURN(auto instances, backend_->List(gpu.index));
    for (const mig::MigBackend::InstanceInfo& i : instances) {
      GPUFRAC_RETURN_IF_ERROR(backend_->Destroy(gpu.index, i.gi_id));
    }
  }
  return backend_->SetMode(gpu.index, enabled);
}

StatusOr<std::vector<std::string>> MigHardware::Apply(const mig::MigPartedConfig& config,
                                                      const std::vector<machine::NodeGpu>& gpus,
                                                      const std::function<bool(int index)>& busy) {
  if (!backend_) return UnavailableError("MIG control is not available here");
  std::vector<mig::ApplyTarget> targets;
  for (const machine::NodeGpu& g : gpus) {
    targets.push_back(machine::MigApplyTarget(g, models_, busy(g.index)));
  }
  return mig::ApplyConfig(config, targets, *backend_);
}

StatusOr<std::string> MigHardware::Export(const std::string& name,
                                          const std::vector<machine::NodeGpu>& gpus) const {
  std::vector<mig::GpuLayout> layouts;
  for (const machine::NodeGpu& g : gpus) {
    mig::GpuLayout layout;
    layout.index = g.index;
    layout.model = ModelOf(g);
    layout.mig_enabled = g.mode == gpu::GpuMode::kMig;
    if (layout.mig_enabled && layout.model && backend_) {
      // An export that silently left a GPU out would wipe it when applied later.
      GPUFRAC_ASSIGN_OR_RETURN(auto instances, backend_->List(g.index));
      for (const mig::MigBackend::InstanceInfo& i : instances) layout.profiles.push_back(i.profile);
    }
    layouts.push_back(layout);
  }
  return mig::ExportMigParted(name, layouts);
}

}  // namespace gpufrac::node
