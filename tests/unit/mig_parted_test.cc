// mig-parted files: a realistic file parses, every mistake is one line naming the file and line,
// entries match GPUs as mig-parted matches them, layouts are placed whatever their order, and an
// exported layout reads back the same.
#include "mig/mig_parted.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>

namespace gpufrac::mig {
namespace {

using Layout = std::vector<std::pair<std::string, int>>;

// The error ParseMigParted gives for `yaml`, checked to be one line.
std::string Error(const std::string& yaml) {
  StatusOr<MigPartedFile> f = ParseMigParted(yaml, "mig.yaml");
  EXPECT_FALSE(f.ok()) << yaml;
  if (f.ok()) return "";
  EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(f.status().message().find('\n'), std::string::npos) << f.status().message();
  return f.status().message();
}

// "mig.yaml:LINE: " prefix test.
::testing::AssertionResult AtLine(const std::string& message, int line) {
  const std::string prefix = "mig.yaml:" + std::to_string(line) + ": ";
  if (message.rfind(prefix, 0) == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "expected " << prefix << "..., got: " << message;
}

const gpu::MigModel& Model(const char* name) {
  const gpu::MigModel* model = gpu::FindMigModel(name);
  EXPECT_NE(model, nullptr) << name;
  if (model == nullptr) std::abort();
  return *model;
}

// What the driver does when instances are created one by one in file order without explicit
// placements: each goes to the lowest legal start that is free. Returns whether all fit.
bool NaiveInOrderFits(const gpu::MigModel& model, const Layout& layout) {
  uint32_t used = 0;
  for (const auto& [name, count] : layout) {
    const gpu::MigProfile* profile = gpu::FindMigProfile(model, name);
    if (profile == nullptr) return false;
    for (int i = 0; i < count; ++i) {
      bool placed = false;
      for (int s = 0; s < profile->start_count && !placed; ++s) {
        uint32_t mask = ((1u << profile->starts[s].size) - 1u) << profile->starts[s].start;
        if ((used & mask) == 0) {
          used |= mask;
          placed = true;
        }
      }
      if (!placed) return false;
    }
  }
  return true;
}

// Every instance at one of its profile's legal placements, none overlapping, and the counts
// per profile those of `layout`.
void ExpectValid(const gpu::MigModel& model, const Layout& layout,
                 const std::vector<LayoutInstance>& placed) {
  std::map<int, int> want;
  for (const auto& [name, count] : layout) {
    const gpu::MigProfile* profile = gpu::FindMigProfile(model, name);
    ASSERT_NE(profile, nullptr) << name;
    want[static_cast<int>(profile - model.profiles)] += count;
  }
  std::map<int, int> got;
  uint32_t used = 0;
  for (const LayoutInstance& instance : placed) {
    ASSERT_GE(instance.profile, 0);
    ASSERT_LT(instance.profile, model.profile_count);
    const gpu::MigProfile& profile = model.profiles[instance.profile];
    bool legal = false;
    for (int s = 0; s < profile.start_count; ++s) {
      legal |= profile.starts[s].start == instance.placement.start &&
               profile.starts[s].size == instance.placement.size;
    }
    EXPECT_TRUE(legal) << gpu::MigProfileName(model, profile) << " at " << instance.placement.start;
    uint32_t mask = ((1u << instance.placement.size) - 1u) << instance.placement.start;
    EXPECT_EQ(used & mask, 0u) << "overlap at " << instance.placement.start;
    used |= mask;
    EXPECT_LE(instance.placement.start + instance.placement.size, model.memory_slices);
    ++got[instance.profile];
  }
  for (auto it = want.begin(); it != want.end();) it = it->second == 0 ? want.erase(it) : ++it;
  EXPECT_EQ(got, want);
}

constexpr char kRealistic[] = R"(version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false

  all-enabled:
    - devices: all
      mig-enabled: true
      mig-devices: {}

  all-1g.10gb:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb": 7

  # H100 on GPUs 0-1, everything else left whole.
  custom:
    - devices: [0, 1]
      device-filter: "0x233010DE"
      mig-enabled: true
      mig-devices:
        "1g.10gb+me": 1
        "2g.20gb": 1
        "3g.40gb": 1
    - devices: [2, 3]
      device-filter: ["0x20B010de", "0x20B210DE"]
      mig-enabled: true
      mig-devices:
        1g.5gb: 0
        1c.2g.20gb: 1
    - devices: [4, 5, 6, 7]
      mig-enabled: false
)";

TEST(MigPartedParse, ReadsARealisticFile) {
  StatusOr<MigPartedFile> f = ParseMigParted(kRealistic, "mig.yaml");
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ(f->configs.size(), 4u);
  EXPECT_EQ(f->configs[0].name, "all-disabled");
  EXPECT_EQ(f->configs[1].name, "all-enabled");
  EXPECT_EQ(f->configs[2].name, "all-1g.10gb");
  EXPECT_EQ(f->configs[3].name, "custom");
  EXPECT_EQ(f->Find("nope"), nullptr);

  const MigPartedConfig* disabled = f->Find("all-disabled");
  ASSERT_NE(disabled, nullptr);
  ASSERT_EQ(disabled->entries.size(), 1u);
  EXPECT_TRUE(disabled->entries[0].all_devices);
  EXPECT_FALSE(disabled->entries[0].mig_enabled);
  EXPECT_TRUE(disabled->entries[0].mig_devices.empty());
  EXPECT_EQ(disabled->entries[0].line, 4);

  const MigPartedConfig* enabled = f->Find("all-enabled");
  ASSERT_NE(enabled, nullptr);
  EXPECT_TRUE(enabled->entries[0].mig_enabled);
  EXPECT_TRUE(enabled->entries[0].mig_devices.empty());

  const MigPartedConfig* ones = f->Find("all-1g.10gb");
  ASSERT_NE(ones, nullptr);
  EXPECT_EQ(ones->entries[0].mig_devices, (Layout{{"1g.10gb", 7}}));

  const MigPartedConfig* custom = f->Find("custom");
  ASSERT_NE(custom, nullptr);
  ASSERT_EQ(custom->entries.size(), 3u);
  const MigPartedEntry& h100 = custom->entries[0];
  EXPECT_FALSE(h100.all_devices);
  EXPECT_EQ(h100.devices, (std::vector<int>{0, 1}));
  EXPECT_EQ(h100.device_filter, (std::vector<std::string>{"0x233010DE"}));
  EXPECT_TRUE(h100.mig_enabled);
  // File order, as written.
  EXPECT_EQ(h100.mig_devices, (Layout{{"1g.10gb+me", 1}, {"2g.20gb", 1}, {"3g.40gb", 1}}));
  EXPECT_EQ(h100.line, 20);
  const MigPartedEntry& a100 = custom->entries[1];
  EXPECT_EQ(a100.devices, (std::vector<int>{2, 3}));
  EXPECT_EQ(a100.device_filter, (std::vector<std::string>{"0x20B010de", "0x20B210DE"}));
  EXPECT_EQ(a100.mig_devices, (Layout{{"1g.5gb", 0}, {"1c.2g.20gb", 1}}));
  EXPECT_EQ(a100.line, 27);
  EXPECT_EQ(custom->entries[2].devices, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_FALSE(custom->entries[2].mig_enabled);
}

TEST(MigPartedParse, AcceptsEveryProfileNameNvidiaDocuments) {
  for (const char* name : {"1g.10gb", "7g.80gb", "1g.10gb+me", "1g.23gb+me.all", "1g.23gb+gfx",
                           "2g.45gb+gfx", "1g.23gb-me", "1c.2g.20gb", "1c.1g.5gb+me", "3G.40GB"}) {
    std::string yaml = std::string("version: v1\nmig-configs:\n  c:\n    - devices: all\n") +
                       "      mig-enabled: true\n      mig-devices: {\"" + name + "\": 1}\n";
    StatusOr<MigPartedFile> f = ParseMigParted(yaml, "mig.yaml");
    EXPECT_TRUE(f.ok()) << name << ": " << f.status();
  }
}

TEST(MigPartedParse, VersionMustBeV1) {
  std::string e = Error(
      "version: v2\nmig-configs:\n  c:\n    - devices: all\n"
      "      mig-enabled: false\n");
  EXPECT_TRUE(AtLine(e, 1));
  EXPECT_NE(e.find("version must be v1"), std::string::npos) << e;

  e = Error("\nmig-configs:\n  c:\n    - devices: all\n      mig-enabled: false\n");
  EXPECT_TRUE(AtLine(e, 2));
  EXPECT_NE(e.find("version must be v1"), std::string::npos) << e;
}

TEST(MigPartedParse, RefusesUnknownKeys) {
  std::string e = Error("version: v1\nmig-config:\n  c: []\n");
  EXPECT_TRUE(AtLine(e, 2));
  EXPECT_NE(e.find("unknown key \"mig-config\""), std::string::npos) << e;

  e = Error(R"(version: v1
mig-configs:
  c:
    - devices: all
      mig-enabled: true
      mig-device:
        "1g.10gb": 1
)");
  EXPECT_TRUE(AtLine(e, 6));
  EXPECT_NE(e.find("unknown key \"mig-device\""), std::string::npos) << e;
  EXPECT_NE(e.find("mig-devices"), std::string::npos) << e;  // Lists the allowed keys.
}

TEST(MigPartedParse, RefusesWrongTypes) {
  const std::string head = "version: v1\nmig-configs:\n  c:\n";
  struct Case {
    std::string body;
    int line;
    std::string says;
  };
  std::vector<Case> cases = {
      {"    - devices: some\n      mig-enabled: false\n", 4, "devices must be"},
      {"    - devices: [0, one]\n      mig-enabled: false\n", 4, "GPU indexes"},
      {"    - devices: [0, -1]\n      mig-enabled: false\n", 4, "GPU indexes"},
      {"    - devices: {gpu: 0}\n      mig-enabled: false\n", 4, "devices must be"},
      {"    - devices: all\n      mig-enabled: maybe\n", 5, "mig-enabled must be true or false"},
      {"    - devices: all\n      mig-enabled: [true]\n", 5, "mig-enabled must be true or false"},
      {"    - devices: all\n      mig-enabled: true\n      mig-devices: [\"1g.10gb\"]\n", 6,
       "mig-devices must be a map"},
      {"    - devices: all\n      mig-enabled: true\n      mig-devices:\n        1g.10gb: two\n", 7,
       "whole number"},
      {"    - devices: all\n      mig-enabled: true\n      mig-devices:\n        1g.10gb: 1.5\n", 7,
       "whole number"},
      {"    - devices: all\n      mig-enabled: true\n      mig-devices:\n        1g.10gb: [1]\n", 7,
       "whole number"},
      {"    - devices: all\n      device-filter: 0xZZ\n      mig-enabled: false\n", 5,
       "device-filter must be"},
      {"    - devices: all\n      device-filter: {id: 1}\n      mig-enabled: false\n", 5,
       "device-filter must be"},
      {"    - devices: all\n      device-filter: [\"0x233010DE\", \"H100\"]\n"
       "      mig-enabled: false\n",
       5, "device-filter must be"},
      {"    - all\n", 4, "must be a map"},
      {"    - mig-enabled: false\n", 4, "needs devices"},
      {"    - devices: all\n", 4, "needs mig-enabled"},
      {"    - devices: all\n      mig-enabled: true\n", 4, "no mig-devices"},
      {"    - devices: all\n      mig-enabled: false\n      mig-devices:\n        1g.10gb: 1\n", 7,
       "mig-enabled: false"},
      {"    - devices: all\n      mig-enabled: true\n      mig-devices:\n        1g.10gb: 1\n"
       "        1G.10GB: 2\n",
       8, "appears twice"},
  };
  for (const Case& c : cases) {
    std::string e = Error(head + c.body);
    EXPECT_TRUE(AtLine(e, c.line)) << c.body;
    EXPECT_NE(e.find(c.says), std::string::npos) << c.body << "\n" << e;
  }
}

TEST(MigPartedParse, RefusesNegativeCounts) {
  std::string e = Error(R"(version: v1
mig-configs:
  c:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb": 2
        "2g.20gb": -1
)");
  EXPECT_TRUE(AtLine(e, 8));
  EXPECT_NE(e.find("count of 2g.20gb"), std::string::npos) << e;
  EXPECT_NE(e.find("-1"), std::string::npos) << e;
}

TEST(MigPartedParse, RefusesBadProfileNames) {
  for (const char* name : {"1g10gb", "1g.10", "g.10gb", "1g.10gb+", "1g.10gb+foo", "1g.10gb-gfx",
                           "1g.10gb+me,me", "0g.10gb", "1g.10gb+me-me", "10gb", "1x.1g.10gb"}) {
    std::string e =
        Error(std::string("version: v1\nmig-configs:\n  c:\n    - devices: all\n") +
              "      mig-enabled: true\n      mig-devices:\n        \"" + name + "\": 1\n");
    EXPECT_TRUE(AtLine(e, 7)) << name;
    EXPECT_NE(e.find("is not a MIG profile name"), std::string::npos) << name << ": " << e;
  }
}

TEST(MigPartedParse, RefusesEmptyConfigs) {
  std::string e = Error("version: v1\nmig-configs: {}\n");
  EXPECT_TRUE(AtLine(e, 2));
  EXPECT_NE(e.find("at least one config"), std::string::npos) << e;

  e = Error("version: v1\n");
  EXPECT_TRUE(AtLine(e, 1));
  EXPECT_NE(e.find("mig-configs"), std::string::npos) << e;

  e = Error("version: v1\nmig-configs:\n  empty: []\n");
  EXPECT_TRUE(AtLine(e, 3));
  EXPECT_NE(e.find("config empty must be a list of at least one entry"), std::string::npos) << e;

  e = Error("version: v1\nmig-configs:\n  nothing:\n");
  EXPECT_TRUE(AtLine(e, 3));
  EXPECT_NE(e.find("config nothing"), std::string::npos) << e;

  e = Error("");
  EXPECT_TRUE(AtLine(e, 1));
}

TEST(MigPartedParse, RefusesDuplicateConfigsAndBadYaml) {
  std::string e = Error(R"(version: v1
mig-configs:
  c:
    - devices: all
      mig-enabled: false
  c:
    - devices: all
      mig-enabled: false
)");
  EXPECT_TRUE(AtLine(e, 6));
  EXPECT_NE(e.find("twice"), std::string::npos) << e;

  e = Error("version: v1\nmig-configs:\n  c: [\n");
  EXPECT_NE(e.find("not valid YAML"), std::string::npos) << e;
  EXPECT_EQ(e.rfind("mig.yaml:", 0), 0u) << e;
}

TEST(MigPartedLoad, ReadsAFileAndNamesAMissingOne) {
  StatusOr<MigPartedFile> missing = LoadMigParted("/nonexistent/dir/mig.yaml");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/nonexistent/dir/mig.yaml"), std::string::npos);

  std::string path = ::testing::TempDir() + "/mig_parted_test.yaml";
  {
    std::ofstream out(path);
    out << kRealistic;
  }
  StatusOr<MigPartedFile> f = LoadMigParted(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->configs.size(), 4u);
  {
    std::ofstream out(path);
    out << "version: v1\nmig-configs: {}\n";
  }
  f = LoadMigParted(path);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().message().rfind(path + ":2: ", 0), 0u) << f.status();
  std::remove(path.c_str());
}

TEST(MigPartedMatch, DevicesAndFilter) {
  const gpu::GpuModel* h100 = gpu::FindModel("H100-80GB");
  const gpu::GpuModel* a100 = gpu::FindModel("A100-40GB");
  ASSERT_NE(h100, nullptr);
  ASSERT_NE(a100, nullptr);

  MigPartedEntry all;
  all.all_devices = true;
  EXPECT_TRUE(EntryMatches(all, 0, *h100));
  EXPECT_TRUE(EntryMatches(all, 7, *a100));

  MigPartedEntry listed;
  listed.devices = {1, 3};
  EXPECT_FALSE(EntryMatches(listed, 0, *h100));
  EXPECT_TRUE(EntryMatches(listed, 1, *h100));
  EXPECT_TRUE(EntryMatches(listed, 3, *a100));
  EXPECT_FALSE(EntryMatches(listed, 2, *h100));

  MigPartedEntry filtered;
  filtered.all_devices = true;
  filtered.device_filter = {"0x233010DE"};
  EXPECT_TRUE(EntryMatches(filtered, 0, *h100));
  EXPECT_FALSE(EntryMatches(filtered, 0, *a100));
  filtered.device_filter = {"0x20b010de"};  // Case does not matter.
  EXPECT_TRUE(EntryMatches(filtered, 5, *a100));
  EXPECT_FALSE(EntryMatches(filtered, 5, *h100));
  filtered.device_filter = {"0x20B010DE", "0x233010DE"};
  EXPECT_TRUE(EntryMatches(filtered, 0, *a100));
  EXPECT_TRUE(EntryMatches(filtered, 0, *h100));
  // A subsystem-qualified filter cannot be checked against the catalogue, so it never matches.
  filtered.device_filter = {"0x233010DE:0x16C110DE"};
  EXPECT_FALSE(EntryMatches(filtered, 0, *h100));

  MigPartedEntry both;
  both.devices = {2};
  both.device_filter = {"0x233010DE"};
  EXPECT_TRUE(EntryMatches(both, 2, *h100));
  EXPECT_FALSE(EntryMatches(both, 1, *h100));
  EXPECT_FALSE(EntryMatches(both, 2, *a100));

  // Entries as parsed from a file.
  StatusOr<MigPartedFile> f = ParseMigParted(kRealistic, "mig.yaml");
  ASSERT_TRUE(f.ok()) << f.status();
  const MigPartedConfig& custom = *f->Find("custom");
  EXPECT_TRUE(EntryMatches(custom.entries[0], 1, *h100));
  EXPECT_FALSE(EntryMatches(custom.entries[0], 1, *a100));
  EXPECT_TRUE(EntryMatches(custom.entries[1], 2, *a100));
  EXPECT_FALSE(EntryMatches(custom.entries[1], 2, *h100));
  EXPECT_TRUE(EntryMatches(custom.entries[2], 6, *h100));
}

TEST(MigPartedPlace, FullGpuProfileOfEveryModel) {
  ASSERT_FALSE(gpu::AllMigModels().empty());
  for (const gpu::MigModel& model : gpu::AllMigModels()) {
    int full = 0;
    for (int i = 0; i < model.profile_count; ++i) {
      const gpu::MigProfile& profile = model.profiles[i];
      if (profile.memory_slices != model.memory_slices) continue;
      ++full;
      Layout layout = {{gpu::MigProfileName(model, profile), 1}};
      StatusOr<std::vector<LayoutInstance>> placed = PlaceLayout(model, layout);
      ASSERT_TRUE(placed.ok()) << model.model->short_name << ": " << placed.status();
      ASSERT_EQ(placed->size(), 1u);
      EXPECT_EQ((*placed)[0].profile, i);
      EXPECT_EQ((*placed)[0].placement.start, 0);
      EXPECT_EQ((*placed)[0].placement.size, model.memory_slices);
    }
    EXPECT_GE(full, 1) << model.model->short_name << " has no full-GPU profile";
  }
}

TEST(MigPartedPlace, MaxCountOfEveryProfileOfEveryModel) {
  for (const gpu::MigModel& model : gpu::AllMigModels()) {
    for (int i = 0; i < model.profile_count; ++i) {
      const gpu::MigProfile& profile = model.profiles[i];
      Layout layout = {{gpu::MigProfileName(model, profile), profile.max_count}};
      StatusOr<std::vector<LayoutInstance>> placed = PlaceLayout(model, layout);
      ASSERT_TRUE(placed.ok()) << model.model->short_name << " " << layout[0].first << " x"
                               << profile.max_count << ": " << placed.status();
      EXPECT_EQ(placed->size(), static_cast<size_t>(profile.max_count));
      ExpectValid(model, layout, *placed);
    }
  }
}

TEST(MigPartedPlace, SmallestProfilesFillTheGpu) {
  const gpu::MigModel& h100 = Model("H100-80GB");
  Layout layout = {{"1g.10gb", 7}};
  StatusOr<std::vector<LayoutInstance>> placed = PlaceLayout(h100, layout);
  ASSERT_TRUE(placed.ok()) << placed.status();
  ASSERT_EQ(placed->size(), 7u);
  for (int i = 0; i < 7; ++i) EXPECT_EQ((*placed)[i].placement.start, i);

  const gpu::MigModel& a100 = Model("A100-40GB");
  layout = {{"1g.5gb", 7}};
  placed = PlaceLayout(a100, layout);
  ASSERT_TRUE(placed.ok()) << placed.status();
  ExpectValid(a100, layout, *placed);

  const gpu::MigModel& a30 = Model("A30-24GB");
  layout = {{"1g.6gb", 4}};
  placed = PlaceLayout(a30, layout);
  ASSERT_TRUE(placed.ok()) << placed.status();
  ExpectValid(a30, layout, *placed);
}

TEST(MigPartedPlace, LayoutThatOnlyWorksInOneOrder) {
  // Created in file order at the lowest free start, 1g.10gb takes slice 0, and 4g.40gb (which
  // may only start at 0) no longer fits; placed explicitly the layout is 4g | 2g | 1g.
  const gpu::MigModel& h100 = Model("H100-80GB");
  Layout layout = {{"1g.10gb", 1}, {"4g.40gb", 1}, {"2g.20gb", 1}};
  EXPECT_FALSE(NaiveInOrderFits(h100, layout));
  StatusOr<std::vector<LayoutInstance>> placed = PlaceLayout(h100, layout);
  ASSERT_TRUE(placed.ok()) << placed.status();
  ExpectValid(h100, layout, *placed);
  ASSERT_EQ(placed->size(), 3u);
  EXPECT_EQ(gpu::MigProfileName(h100, h100.profiles[(*placed)[0].profile]), "4g.40gb");
  EXPECT_EQ((*placed)[0].placement.start, 0);
  EXPECT_EQ(gpu::MigProfileName(h100, h100.profiles[(*placed)[1].profile]), "2g.20gb");
  EXPECT_EQ((*placed)[1].placement.start, 4);
  EXPECT_EQ(gpu::MigProfileName(h100, h100.profiles[(*placed)[2].profile]), "1g.10gb");
  EXPECT_EQ((*placed)[2].placement.start, 6);

  // The same trap on A100-40GB: in file order 1g.5gb takes slice 0 and 2g.10gb slices 2-3, and
  // 4g.20gb, which may only start at 0, is left out; placed explicitly it is 4g | 2g | 1g.
  const gpu::MigModel& a100 = Model("A100-40GB");
  layout = {{"1g.5gb", 1}, {"2g.10gb", 1}, {"4g.20gb", 1}};
  EXPECT_FALSE(NaiveInOrderFits(a100, layout));
  placed = PlaceLayout(a100, layout);
  ASSERT_TRUE(placed.ok()) << placed.status();
  ExpectValid(a100, layout, *placed);

  // Order does not change the answer.
  Layout reversed = {{"2g.20gb", 1}, {"4g.40gb", 1}, {"1g.10gb", 1}};
  StatusOr<std::vector<LayoutInstance>> again = PlaceLayout(h100, reversed);
  ASSERT_TRUE(again.ok()) << again.status();
  StatusOr<std::vector<LayoutInstance>> first =
      PlaceLayout(h100, {{"1g.10gb", 1}, {"4g.40gb", 1}, {"2g.20gb", 1}});
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(again->size(), first->size());
  for (size_t i = 0; i < first->size(); ++i) {
    EXPECT_EQ((*again)[i].profile, (*first)[i].profile);
    EXPECT_EQ((*again)[i].placement.start, (*first)[i].placement.start);
  }
}

TEST(MigPartedPlace, EmptyLayoutAndZeroCounts) {
  const gpu::MigModel& h100 = Model("H100-80GB");
  StatusOr<std::vector<LayoutInstance>> placed = PlaceLayout(h100, {});
  ASSERT_TRUE(placed.ok()) << placed.status();
  EXPECT_TRUE(placed->empty());
  placed = PlaceLayout(h100, {{"3g.40gb", 0}, {"7g.80gb", 1}});
  ASSERT_TRUE(placed.ok()) << placed.status();
  EXPECT_EQ(placed->size(), 1u);
}

TEST(MigPartedPlace, RefusesImpossibleLayouts) {
  const gpu::MigModel& h100 = Model("H100-80GB");
  for (const Layout& layout :
       {Layout{{"7g.80gb", 1}, {"1g.10gb", 1}}, Layout{{"4g.40gb", 1}, {"3g.40gb", 2}},
        Layout{{"1g.10gb", 7}, {"1g.20gb", 1}}, Layout{{"4g.40gb", 1}, {"2g.20gb", 2}}}) {
    StatusOr<std::vector<LayoutInstance>> placed = PlaceLayout(h100, layout);
    ASSERT_FALSE(placed.ok()) << layout[0].first;
    EXPECT_EQ(placed.status().code(), StatusCode::kInvalidArgument);
    const std::string& m = placed.status().message();
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    EXPECT_NE(m.find("does not fit on H100-80GB"), std::string::npos) << m;
    EXPECT_NE(m.find(layout[0].first), std::string::npos) << m;
  }
}

TEST(MigPartedPlace, RefusesMoreThanMaxCount) {
  const gpu::MigModel& h100 = Model("H100-80GB");
  StatusOr<std::vector<LayoutInstance>> placed = PlaceLayout(h100, {{"1g.10gb", 8}});
  ASSERT_FALSE(placed.ok());
  EXPECT_EQ(placed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(placed.status().message().find("at most 7"), std::string::npos) << placed.status();
  EXPECT_NE(placed.status().message().find("H100-80GB"), std::string::npos) << placed.status();

  placed = PlaceLayout(h100, {{"1g.10gb+me", 2}});
  ASSERT_FALSE(placed.ok());
  EXPECT_NE(placed.status().message().find("at most 1"), std::string::npos) << placed.status();
}

TEST(MigPartedPlace, RefusesTwoMediaExtensionInstances) {
  // A30 has two "+me" profiles, but one set of media engines between them.
  const gpu::MigModel& a30 = Model("A30-24GB");
  StatusOr<std::vector<LayoutInstance>> placed =
      PlaceLayout(a30, {{"1g.6gb+me", 1}, {"2g.12gb+me", 1}});
  ASSERT_FALSE(placed.ok());
  EXPECT_EQ(placed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(placed.status().message().find("media extensions"), std::string::npos)
      << placed.status();
  placed = PlaceLayout(a30, {{"1g.6gb", 2}, {"2g.12gb+me", 1}});
  ASSERT_TRUE(placed.ok()) << placed.status();
}

TEST(MigPartedPlace, RefusesProfilesTheModelLacks) {
  const gpu::MigModel& h100 = Model("H100-80GB");
  for (const char* name : {"5g.50gb", "1g.5gb", "1c.2g.20gb"}) {
    StatusOr<std::vector<LayoutInstance>> placed = PlaceLayout(h100, {{name, 1}});
    ASSERT_FALSE(placed.ok()) << name;
    EXPECT_EQ(placed.status().code(), StatusCode::kNotFound);
    const std::string& m = placed.status().message();
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    EXPECT_NE(m.find(name), std::string::npos) << m;
    EXPECT_NE(m.find("1g.10gb"), std::string::npos) << m;  // Lists what it has.
    EXPECT_NE(m.find("7g.80gb"), std::string::npos) << m;
  }
}

TEST(MigPartedExport, ReadsBackTheSameLayout) {
  const gpu::MigModel& h100 = Model("H100-80GB");
  const gpu::MigModel& a100 = Model("A100-40GB");
  auto index_of = [](const gpu::MigModel& model, const char* name) {
    const gpu::MigProfile* p = gpu::FindMigProfile(model, name);
    EXPECT_NE(p, nullptr) << name;
    return p == nullptr ? 0 : static_cast<int>(p - model.profiles);
  };
  std::vector<GpuLayout> gpus(5);
  gpus[0] = {0,
             &h100,
             true,
             {index_of(h100, "1g.10gb"), index_of(h100, "4g.40gb"), index_of(h100, "1g.10gb"),
              index_of(h100, "1g.10gb+me")}};
  gpus[1] = {1, &h100, false, {}};
  gpus[2] = {2, nullptr, false, {}};  // An L4: no MIG.
  gpus[3] = {3, &a100, true, {}};     // MIG on, nothing created.
  gpus[4] = {4, &a100, true, {index_of(a100, "3g.20gb"), index_of(a100, "2g.10gb")}};
  std::string yaml = ExportMigParted("current", gpus);

  StatusOr<MigPartedFile> f = ParseMigParted(yaml, "export.yaml");
  ASSERT_TRUE(f.ok()) << f.status() << "\n" << yaml;
  ASSERT_EQ(f->configs.size(), 1u);
  const MigPartedConfig* config = f->Find("current");
  ASSERT_NE(config, nullptr) << yaml;
  ASSERT_EQ(config->entries.size(), 5u) << yaml;
  for (int i = 0; i < 5; ++i) {
    EXPECT_FALSE(config->entries[i].all_devices);
    EXPECT_EQ(config->entries[i].devices, (std::vector<int>{i})) << yaml;
    EXPECT_TRUE(config->entries[i].device_filter.empty());
  }
  // Counted by name, in catalogue order (smallest profile first).
  EXPECT_TRUE(config->entries[0].mig_enabled);
  Layout want = {{"1g.10gb", 2}, {"1g.10gb+me", 1}, {"4g.40gb", 1}};
  std::sort(want.begin(), want.end(), [&](const auto& a, const auto& b) {
    return index_of(h100, a.first.c_str()) < index_of(h100, b.first.c_str());
  });
  EXPECT_EQ(config->entries[0].mig_devices, want) << yaml;
  EXPECT_FALSE(config->entries[1].mig_enabled);
  EXPECT_TRUE(config->entries[1].mig_devices.empty());
  EXPECT_FALSE(config->entries[2].mig_enabled);
  EXPECT_TRUE(config->entries[3].mig_enabled);
  EXPECT_TRUE(config->entries[3].mig_devices.empty());
  EXPECT_TRUE(config->entries[4].mig_enabled);

  // And the exported layout places back on its model.
  StatusOr<std::vector<LayoutInstance>> placed = PlaceLayout(h100, config->entries[0].mig_devices);
  ASSERT_TRUE(placed.ok()) << placed.status();
  ExpectValid(h100, config->entries[0].mig_devices, *placed);
  placed = PlaceLayout(a100, config->entries[4].mig_devices);
  ASSERT_TRUE(placed.ok()) << placed.status();
  ExpectValid(a100, config->entries[4].mig_devices, *placed);
}

}  // namespace
}  // namespace gpufrac::mig
