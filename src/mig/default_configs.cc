// The default mig-parted configurations from the MIG catalogue (see default_configs.h).
#include "mig/default_configs.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "gpu/mig_catalogue.h"

namespace gpufrac::mig {
namespace {

// A device-filter entry for `model` ("0x233010DE"), as mig-parted writes them.
std::string DeviceFilter(const gpu::GpuModel& model) {
  char text[16];
  std::snprintf(text, sizeof(text), "0x%04X10DE", static_cast<unsigned>(model.pci_device_id));
  return text;
}

MigPartedEntry ModelEntry(const gpu::MigModel& model, bool mig_enabled) {
  MigPartedEntry entry;
  entry.all_devices = true;
  entry.device_filter = {DeviceFilter(*model.model)};
  entry.mig_enabled = mig_enabled;
  return entry;
}

// all-balanced: two of the smallest 1g profile, one 2g and (on 7-slice models) one 3g, each the
// first profile of that size without media extensions.
std::vector<std::pair<std::string, int>> Balanced(const gpu::MigModel& model) {
  std::vector<std::pair<std::string, int>> devices;
  for (int size : {1, 2, 3}) {
    if (size == 3 && model.compute_slices < 7) break;
    for (int i = 0; i < model.profile_count; ++i) {
      const gpu::MigProfile& p = model.profiles[i];
      if (p.compute_slices == size && !p.media_extensions) {
        devices.push_back({gpu::MigProfileName(model, p), size == 1 ? 2 : 1});
        break;
      }
    }
  }
  return devices;
}

}  // namespace

MigPartedFile DefaultMigConfigs() {
  MigPartedFile file;
  MigPartedConfig disabled{.name = "all-disabled", .entries = {}};
  MigPartedEntry off;
  off.all_devices = true;
  disabled.entries.push_back(off);
  file.configs.push_back(std::move(disabled));

  MigPartedConfig enabled{.name = "all-enabled", .entries = {}};
  MigPartedConfig balanced{.name = "all-balanced", .entries = {}};
  std::vector<MigPartedConfig> per_profile;  // all-<profile>, in order of first appearance.
  for (const gpu::MigModel& model : gpu::AllMigModels()) {
    if (model.model == nullptr) continue;
    enabled.entries.push_back(ModelEntry(model, true));
    MigPartedEntry mix = ModelEntry(model, true);
    mix.mig_devices = Balanced(model);
    balanced.entries.push_back(std::move(mix));
    for (int i = 0; i < model.profile_count; ++i) {
      const std::string profile = gpu::MigProfileName(model, model.profiles[i]);
      std::string name = "all-" + profile;
      std::replace(name.begin(), name.end(), '+', '.');
      auto config = std::find_if(per_profile.begin(), per_profile.end(),
                                 [&name](const MigPartedConfig& c) { return c.name == name; });
      if (config == per_profile.end()) {
        per_profile.push_back({.name = name, .entries = {}});
        config = per_profile.end() - 1;
      }
      MigPartedEntry all = ModelEntry(model, true);
      all.mig_devices = {{profile, model.profiles[i].max_count}};
      config->entries.push_back(std::move(all));
    }
  }
  file.configs.push_back(std::move(enabled));
  for (MigPartedConfig& c : per_profile) file.configs.push_back(std::move(c));
  file.configs.push_back(std::move(balanced));
  return file;
}

MigPartedFile MergeMigConfigs(MigPartedFile defaults, const MigPartedFile& operators) {
  for (const MigPartedConfig& config : operators.configs) {
    auto same = std::find_if(defaults.configs.begin(), defaults.configs.end(),
                             [&config](const MigPartedConfig& c) { return c.name == config.name; });
    if (same != defaults.configs.end()) {
      *same = config;
    } else {
      defaults.configs.push_back(config);
    }
  }
  return defaults;
}

}  // namespace gpufrac::mig
