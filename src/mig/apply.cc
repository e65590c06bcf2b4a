// Checks, applies and rolls back mig-parted configurations (see apply.h).
#include "mig/apply.h"

#include <utility>

namespace gpufrac::mig {
namespace {

struct Step {
  int gpu;
  const gpu::MigModel* model;
  std::vector<LayoutInstance> layout;
};

// What applying `config` to `gpus` changes; an error if it cannot apply as a whole.
StatusOr<std::vector<Step>> Plan(const MigPartedConfig& config,
                                 const std::vector<ApplyTarget>& gpus) {
  std::vector<Step> steps;
  for (const ApplyTarget& g : gpus) {
    const MigPartedEntry* entry = EntryFor(config, g);
    if (!entry) continue;
    std::string which =
        "GPU " + std::to_string(g.index) + " (" + std::string(g.model->short_name) + ")";
    if (entry->mig_enabled != g.mig_enabled) {
      return FailedPreconditionError(which +
                                     (entry->mig_enabled
                                          ? " is not in MIG mode; run gpufrac mig enable --gpu "
                                          : " is in MIG mode; run gpufrac mig disable --gpu ") +
                                     std::to_string(g.index) + " first");
    }
    if (!g.mig_enabled || !g.mig_model) continue;
    if (g.busy) {
      return FailedPreconditionError(which +
                                     " has MIG instances serving jobs; apply needs it idle");
    }
    auto layout = PlaceLayout(*g.mig_model, entry->mig_devices);
    if (!layout.ok()) return layout.status().WithContext(which);
    steps.push_back({g.index, g.mig_model, *layout});
  }
  if (steps.empty()) {
    return InvalidArgumentError("configuration " + config.name +
                                " matches no GPU in MIG mode on this node");
  }
  return steps;
}

}  // namespace

const MigPartedEntry* EntryFor(const MigPartedConfig& config, const ApplyTarget& target) {
  if (target.model == nullptr) return nullptr;
  for (const MigPartedEntry& e : config.entries) {
    if (EntryMatches(e, target.index, *target.model)) return &e;
  }
  return nullptr;
}

StatusOr<const MigPartedConfig*> ChooseConfig(const MigPartedFile& file, const std::string& name) {
  std::string names;
  for (const MigPartedConfig& c : file.configs) names += (names.empty() ? "" : ", ") + c.name;
  const MigPartedConfig* config =
      name.empty() && file.configs.size() == 1 ? &file.configs[0] : file.Find(name);
  if (name.empty() && !config) {
    return InvalidArgumentError("the file has several configurations (" + names +
                                "); name one with -c");
  }
  if (!config) {
    return NotFoundError("no configuration " + name + " in the file (it has: " + names + ")");
  }
  return config;
}

Status CheckConfig(const MigPartedConfig& config, const std::vector<ApplyTarget>& gpus) {
  return Plan(config, gpus).status();
}

StatusOr<std::vector<std::string>> ApplyConfig(const MigPartedConfig& config,
                                               const std::vector<ApplyTarget>& gpus,
                                               MigBackend& backend) {
  GPUFRAC_ASSIGN_OR_RETURN(std::vector<Step> steps, Plan(config, gpus));
  std::vector<std::pair<int, unsigned>> created;
  std::vector<std::pair<int, MigBackend::InstanceInfo>> destroyed;
  // Back to the layout before the apply: what it created goes, what it destroyed comes back
  // (at the same placement).
  auto roll_back = [&](const Status& why) {
    for (const auto& [gpu, gi] : created) (void)backend.Destroy(gpu, gi);
    int restored = 0;
    for (const auto& [gpu, info] : destroyed) {
      restored += backend.Create(gpu, info.profile, info.placement).ok();
    }
    return Status(why.code(), why.message() + "; rolled back: the " +
                                  std::to_string(created.size()) +
                                  " instance(s) this apply created were destroyed again and " +
                                  std::to_string(restored) + " of the " +
                                  std::to_string(destroyed.size()) + " it removed restored");
  };
  std::vector<std::string> report;
  for (const Step& step : steps) {
    auto existing = backend.List(step.gpu);
    if (!existing.ok()) return roll_back(existing.status());
    for (const MigBackend::InstanceInfo& i : *existing) {
      Status gone = backend.Destroy(step.gpu, i.gi_id);
      if (!gone.ok()) return roll_back(gone);
      destroyed.push_back({step.gpu, i});
    }
    std::string line = "GPU " + std::to_string(step.gpu) + ":";
    for (const LayoutInstance& want : step.layout) {
      auto made = backend.Create(step.gpu, want.profile, want.placement);
      if (!made.ok()) return roll_back(made.status());
      created.push_back({step.gpu, made->gi_id});
      line += " " + gpu::MigProfileName(*step.model, step.model->profiles[want.profile]) + "@" +
              std::to_string(want.placement.start);
    }
    report.push_back(line);
  }
  return report;
}

}  // namespace gpufrac::mig
