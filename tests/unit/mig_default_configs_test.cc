// The mig-parted configurations every node knows by NVIDIA's names: what each does on the
// catalogue's models (the counts an operator labelling a node expects), that every layout fits,
// and that an operator's file adds to them and wins on a clash.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "gpu/catalogue.h"
#include "gpu/mig_catalogue.h"
#include "mig/default_configs.h"

namespace gpufrac::mig {
namespace {

using Layout = std::vector<std::pair<std::string, int>>;

// The entry of `name` that applies to GPU 0 of `model`; null when none does.
const MigPartedEntry* EntryOn(const MigPartedFile& file, const std::string& name,
                              const std::string& model) {
  const MigPartedConfig* config = file.Find(name);
  EXPECT_NE(config, nullptr) << name;
  if (config == nullptr) return nullptr;
  for (const MigPartedEntry& e : config->entries) {
    if (EntryMatches(e, 0, *gpu::FindModel(model))) return &e;
  }
  return nullptr;
}

TEST(MigDefaultConfigs, HaveNvidiasNamesWithTheLayoutsTheyMeanPerModel) {
  const MigPartedFile file = DefaultMigConfigs();
  const MigPartedEntry* e = EntryOn(file, "all-1g.10gb", "H100-80GB");
  ASSERT_NE(e, nullptr);
  EXPECT_TRUE(e->mig_enabled);
  EXPECT_EQ(e->mig_devices, (Layout{{"1g.10gb", 7}}));
  // The id nvidia-smi --query-gpu=pci.device_id prints on an H100 80GB HBM3, as mig-parted's
  // device-filter takes it.
  EXPECT_EQ(e->device_filter, (std::vector<std::string>{"0x233010DE"}));
  e = EntryOn(file, "all-1g.10gb.me", "H100-80GB");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->mig_devices, (Layout{{"1g.10gb+me", 1}}));
  e = EntryOn(file, "all-3g.40gb", "H100-80GB");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->mig_devices, (Layout{{"3g.40gb", 2}}));
  e = EntryOn(file, "all-1g.5gb", "A100-40GB");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->mig_devices, (Layout{{"1g.5gb", 7}}));
  EXPECT_EQ(EntryOn(file, "all-1g.5gb", "H100-80GB"), nullptr)
      << "a profile a model lacks matches none of its GPUs";
  e = EntryOn(file, "all-balanced", "H100-80GB");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->mig_devices, (Layout{{"1g.10gb", 2}, {"2g.20gb", 1}, {"3g.40gb", 1}}));
  e = EntryOn(file, "all-balanced", "A30-24GB");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->mig_devices, (Layout{{"1g.6gb", 2}, {"2g.12gb", 1}}));
  e = EntryOn(file, "all-disabled", "H100-80GB");
  ASSERT_NE(e, nullptr);
  EXPECT_FALSE(e->mig_enabled);
  e = EntryOn(file, "all-enabled", "A30-24GB");
  ASSERT_NE(e, nullptr);
  EXPECT_TRUE(e->mig_enabled);
  EXPECT_TRUE(e->mig_devices.empty());
  EXPECT_EQ(EntryOn(file, "all-disabled", "L4"), file.Find("all-disabled")->entries.data())
      << "all-disabled names every GPU, as NVIDIA's does";
  EXPECT_EQ(EntryOn(file, "all-balanced", "L4"), nullptr);
}

TEST(MigDefaultConfigs, EveryLayoutFitsTheModelsItNamesAndNamesAreUnique) {
  const MigPartedFile file = DefaultMigConfigs();
  std::set<std::string> names;
  for (const MigPartedConfig& c : file.configs) {
    EXPECT_TRUE(names.insert(c.name).second) << c.name << " twice";
    for (const MigPartedEntry& e : c.entries) {
      for (const gpu::MigModel& model : gpu::AllMigModels()) {
        if (model.model == nullptr || !EntryMatches(e, 0, *model.model)) continue;
        auto layout = PlaceLayout(model, e.mig_devices);
        EXPECT_TRUE(layout.ok()) << c.name << " on " << model.model->short_name << ": "
                                 << layout.status().ToString();
      }
    }
  }
  EXPECT_GE(names.size(), 10u);
}

TEST(MigDefaultConfigs, AnOperatorsFileAddsConfigurationsAndWinsOnAClash) {
  auto mine = ParseMigParted(R"(version: v1
mig-configs:
  all-1g.10gb:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb": 2
  inference:
    - devices: [0, 1]
      mig-enabled: true
      mig-devices:
        "3g.40gb": 2
)",
                             "configmap.yaml");
  ASSERT_TRUE(mine.ok()) << mine.status().ToString();
  const MigPartedFile defaults = DefaultMigConfigs();
  const MigPartedFile merged = MergeMigConfigs(defaults, *mine);
  EXPECT_EQ(merged.configs.size(), defaults.configs.size() + 1);
  const MigPartedEntry* e = EntryOn(merged, "all-1g.10gb", "H100-80GB");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->mig_devices, (Layout{{"1g.10gb", 2}})) << "the operator's replaces the default";
  EXPECT_EQ(merged.Find("all-1g.10gb")->entries.size(), 1u) << "whole, not entry by entry";
  ASSERT_NE(merged.Find("inference"), nullptr);
  ASSERT_NE(merged.Find("all-balanced"), nullptr) << "the other defaults stay";
}

}  // namespace
}  // namespace gpufrac::mig
