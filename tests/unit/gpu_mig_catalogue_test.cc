// Tests of the MIG profile catalogue: derived names against NVIDIA's documented ones, placement
// geometry (fits, aligned, packable to the documented counts), NVML ids and the lookups.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "gpu/catalogue.h"
#include "gpu/mig_catalogue.h"

namespace gpufrac::gpu {
namespace {

// The profile names NVIDIA documents for each model, smallest first: the MIG user guide's
// "Supported MIG Profiles" tables (A30, A100, H100, H200, B200) and the names NVIDIA's mig-parted
// default configuration uses for H100 NVL, GH200 and B200.
const std::map<std::string, std::vector<std::string>>& DocumentedNames() {
  static const auto* names = new std::map<std::string, std::vector<std::string>>{
      {"A100-40GB", {"1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"}},
      {"A100-80GB",
       {"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}},
      {"H100-80GB",
       {"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}},
      {"H100-94GB",
       {"1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"}},
      {"GH200-96GB",
       {"1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.48gb", "4g.48gb", "7g.96gb"}},
      {"H200-141GB",
       {"1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"}},
      {"A30-24GB", {"1g.6gb", "1g.6gb+me", "2g.12gb", "2g.12gb+me", "4g.24gb"}},
      {"B200", {"1g.23gb", "1g.23gb+me", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"}},
  };
  return *names;
}

// The most instances of each profile NVIDIA documents ("Number of Instances Available").
const std::map<std::string, int>& DocumentedCounts() {
  static const auto* counts = new std::map<std::string, int>{
      {"1g", 7}, {"1g+me", 1}, {"1g-2slice", 4}, {"2g", 3}, {"3g", 2}, {"4g", 1}, {"7g", 1},
  };
  return *counts;
}

std::vector<std::string> Names(const MigModel& model) {
  std::vector<std::string> names;
  for (int i = 0; i < model.profile_count; ++i) {
    names.push_back(MigProfileName(model, model.profiles[i]));
  }
  return names;
}

TEST(MigCatalogueTest, EveryMigModelIsInTheGpuCatalogue) {
  ASSERT_EQ(AllMigModels().size(), DocumentedNames().size());
  for (const MigModel& model : AllMigModels()) {
    ASSERT_NE(model.model, nullptr);
    EXPECT_EQ(FindModel(model.model->short_name), model.model);
    EXPECT_TRUE(DocumentedNames().contains(std::string(model.model->short_name)))
        << model.model->short_name;
  }
}

TEST(MigCatalogueTest, DerivedNamesAreTheDocumentedOnes) {
  for (const auto& [short_name, names] : DocumentedNames()) {
    const MigModel* model = FindMigModel(short_name);
    ASSERT_NE(model, nullptr) << short_name;
    EXPECT_EQ(Names(*model), names) << short_name;
  }
}

TEST(MigCatalogueTest, SliceCountsPerFamily) {
  for (const MigModel& model : AllMigModels()) {
    if (model.model->short_name == "A30-24GB") {
      EXPECT_EQ(model.memory_slices, 4);
      EXPECT_EQ(model.compute_slices, 4);
    } else {
      EXPECT_EQ(model.memory_slices, 8) << model.model->short_name;
      EXPECT_EQ(model.compute_slices, 7) << model.model->short_name;
    }
    EXPECT_GT(model.nominal_memory_gb, 0);
  }
}

TEST(MigCatalogueTest, PlacementsFitAreSortedDistinctAndAligned) {
  for (const MigModel& model : AllMigModels()) {
    ASSERT_GT(model.profile_count, 0);
    ASSERT_LE(model.profile_count, kMaxMigProfiles);
    for (int i = 0; i < model.profile_count; ++i) {
      const MigProfile& p = model.profiles[i];
      const std::string name = MigProfileName(model, p);
      SCOPED_TRACE(std::string(model.model->short_name) + " " + name);
      ASSERT_GT(p.start_count, 0);
      ASSERT_LE(p.start_count, kMaxMigStarts);
      EXPECT_GE(p.max_count, 1);
      EXPECT_LE(p.max_count, p.start_count);
      EXPECT_LE(p.compute_slices * p.max_count, model.compute_slices);
      for (int s = 0; s < p.start_count; ++s) {
        const MigPlacement& at = p.starts[s];
        EXPECT_EQ(at.size, p.memory_slices);
        EXPECT_GE(at.start, 0);
        EXPECT_LE(at.start + at.size, model.memory_slices);
        // The guide's placements start on a multiple of their size.
        EXPECT_EQ(at.start % at.size, 0);
        if (s > 0) {
          EXPECT_LT(p.starts[s - 1].start, at.start);
        }
      }
    }
  }
}

TEST(MigCatalogueTest, DocumentedStarts) {
  const MigModel* a100 = FindMigModel("A100-40GB");
  ASSERT_NE(a100, nullptr);
  auto starts = [](const MigProfile& p) {
    std::vector<int> out;
    for (int s = 0; s < p.start_count; ++s) out.push_back(p.starts[s].start);
    return out;
  };
  EXPECT_EQ(starts(*FindMigProfile(*a100, "1g.5gb")), (std::vector<int>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(starts(*FindMigProfile(*a100, "1g.5gb+me")), (std::vector<int>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(starts(*FindMigProfile(*a100, "1g.10gb")), (std::vector<int>{0, 2, 4, 6}));
  EXPECT_EQ(starts(*FindMigProfile(*a100, "2g.10gb")), (std::vector<int>{0, 2, 4}));
  EXPECT_EQ(starts(*FindMigProfile(*a100, "3g.20gb")), (std::vector<int>{0, 4}));
  EXPECT_EQ(FindMigProfile(*a100, "3g.20gb")->memory_slices, 4);
  EXPECT_EQ(starts(*FindMigProfile(*a100, "4g.20gb")), (std::vector<int>{0}));
  EXPECT_EQ(starts(*FindMigProfile(*a100, "7g.40gb")), (std::vector<int>{0}));
  EXPECT_EQ(FindMigProfile(*a100, "7g.40gb")->memory_slices, 8);

  const MigModel* a30 = FindMigModel("A30-24GB");
  ASSERT_NE(a30, nullptr);
  EXPECT_EQ(starts(*FindMigProfile(*a30, "1g.6gb")), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(starts(*FindMigProfile(*a30, "2g.12gb")), (std::vector<int>{0, 2}));
  EXPECT_EQ(starts(*FindMigProfile(*a30, "2g.12gb+me")), (std::vector<int>{0, 2}));
  EXPECT_EQ(starts(*FindMigProfile(*a30, "4g.24gb")), (std::vector<int>{0}));
}

TEST(MigCatalogueTest, DocumentedInstanceCounts) {
  for (const MigModel& model : AllMigModels()) {
    if (model.memory_slices != 8) continue;
    const std::vector<std::string> keys = {"1g", "1g+me", "1g-2slice", "2g", "3g", "4g", "7g"};
    ASSERT_EQ(model.profile_count, static_cast<int>(keys.size()));
    for (int i = 0; i < model.profile_count; ++i) {
      EXPECT_EQ(model.profiles[i].max_count, DocumentedCounts().at(keys[i]))
          << model.model->short_name << " " << keys[i];
    }
  }
  const MigModel* a30 = FindMigModel("A30-24GB");
  ASSERT_NE(a30, nullptr);
  std::vector<int> counts;
  for (int i = 0; i < a30->profile_count; ++i) counts.push_back(a30->profiles[i].max_count);
  EXPECT_EQ(counts, (std::vector<int>{4, 1, 2, 1, 1}));
}

TEST(MigCatalogueTest, MaxCountInstancesPackWithoutOverlap) {
  for (const MigModel& model : AllMigModels()) {
    for (int i = 0; i < model.profile_count; ++i) {
      const MigProfile& p = model.profiles[i];
      if (p.media_extensions) continue;
      SCOPED_TRACE(std::string(model.model->short_name) + " " + MigProfileName(model, p));
      std::vector<bool> used(model.memory_slices, false);
      int placed = 0;
      for (int s = 0; s < p.start_count && placed < p.max_count; ++s) {
        const MigPlacement& at = p.starts[s];
        bool free = true;
        for (int k = at.start; k < at.start + at.size; ++k) free = free && !used[k];
        if (!free) continue;
        for (int k = at.start; k < at.start + at.size; ++k) used[k] = true;
        ++placed;
      }
      EXPECT_EQ(placed, p.max_count);
    }
  }
}

TEST(MigCatalogueTest, FullGpuProfileCoversEverySlice) {
  for (const MigModel& model : AllMigModels()) {
    const MigProfile& full = model.profiles[model.profile_count - 1];
    SCOPED_TRACE(model.model->short_name);
    EXPECT_EQ(full.compute_slices, model.compute_slices);
    EXPECT_EQ(full.memory_slices, model.memory_slices);
    ASSERT_EQ(full.start_count, 1);
    EXPECT_EQ(full.starts[0].start, 0);
    EXPECT_EQ(full.starts[0].size, model.memory_slices);
    EXPECT_EQ(full.max_count, 1);
  }
}

TEST(MigCatalogueTest, ProfilesAreSmallestFirstAndMemoryIsPlausible) {
  for (const MigModel& model : AllMigModels()) {
    SCOPED_TRACE(model.model->short_name);
    for (int i = 0; i < model.profile_count; ++i) {
      const MigProfile& p = model.profiles[i];
      EXPECT_GT(p.memory_bytes, 0u);
      EXPECT_LE(p.memory_bytes, model.model->memory_bytes);
      // An instance has at most its slices' share of the card, and not much less.
      EXPECT_LE(p.memory_bytes * model.memory_slices, model.model->memory_bytes * p.memory_slices);
      EXPECT_GE(p.memory_bytes * model.memory_slices * 100,
                model.model->memory_bytes * p.memory_slices * 85);
      if (i > 0) {
        const MigProfile& prev = model.profiles[i - 1];
        EXPECT_LE(prev.memory_slices, p.memory_slices);
        EXPECT_LE(prev.memory_bytes, p.memory_bytes);
        if (prev.memory_slices == p.memory_slices) {
          EXPECT_LE(prev.compute_slices, p.compute_slices);
        }
      }
    }
  }
}

TEST(MigCatalogueTest, KnownMemoryFigures) {
  constexpr uint64_t kMiB = uint64_t{1} << 20;
  const MigModel* h100 = FindMigModel("H100-80GB");
  ASSERT_NE(h100, nullptr);
  EXPECT_EQ(FindMigProfile(*h100, "1g.10gb")->memory_bytes, 9984 * kMiB);
  EXPECT_EQ(FindMigProfile(*h100, "3g.40gb")->memory_bytes, 40448 * kMiB);
  EXPECT_EQ(FindMigProfile(*h100, "7g.80gb")->memory_bytes, 81152 * kMiB);

  // Figures nvidia-smi printed on real cards (sources in mig_catalogue.cc).
  const MigModel* a30 = FindMigModel("A30-24GB");
  ASSERT_NE(a30, nullptr);
  EXPECT_EQ(FindMigProfile(*a30, "1g.6gb")->memory_bytes, 5952 * kMiB);
  EXPECT_EQ(FindMigProfile(*a30, "2g.12gb+me")->memory_bytes, 11968 * kMiB);
  EXPECT_EQ(FindMigProfile(*a30, "4g.24gb")->memory_bytes, 24000 * kMiB);
  const MigModel* nvl = FindMigModel("H100-94GB");
  ASSERT_NE(nvl, nullptr);
  EXPECT_EQ(FindMigProfile(*nvl, "1g.12gb")->memory_bytes, 11008 * kMiB);
  EXPECT_EQ(FindMigProfile(*nvl, "3g.47gb")->memory_bytes, 47488 * kMiB);
  EXPECT_EQ(FindMigProfile(*nvl, "7g.94gb")->memory_bytes, 95360 * kMiB);
  const MigModel* gh200 = FindMigModel("GH200-96GB");
  ASSERT_NE(gh200, nullptr);
  EXPECT_EQ(FindMigProfile(*gh200, "1g.12gb")->memory_bytes, 11264 * kMiB);
  EXPECT_EQ(FindMigProfile(*gh200, "2g.24gb")->memory_bytes, 23552 * kMiB);
  EXPECT_EQ(FindMigProfile(*gh200, "4g.48gb")->memory_bytes, 47616 * kMiB);
  EXPECT_EQ(FindMigProfile(*gh200, "7g.96gb")->memory_bytes, 95232 * kMiB);
}

// The A30's -lgipp placements, the 2g.12gb+me one included, and its profile ids.
TEST(MigCatalogueTest, A30PlacementsAndIds) {
  const MigModel* a30 = FindMigModel("A30-24GB");
  ASSERT_NE(a30, nullptr);
  const MigProfile* me = FindMigProfile(*a30, "2g.12gb+me");
  ASSERT_NE(me, nullptr);
  EXPECT_EQ(me->profile_id, 6u);
  ASSERT_EQ(me->start_count, 2);
  EXPECT_EQ(me->starts[0].start, 0);
  EXPECT_EQ(me->starts[1].start, 2);
  EXPECT_EQ(FindMigProfile(*a30, "1g.6gb")->profile_id, 14u);
  EXPECT_EQ(FindMigProfile(*a30, "1g.6gb+me")->profile_id, 21u);
  EXPECT_EQ(FindMigProfile(*a30, "2g.12gb")->profile_id, 5u);
  EXPECT_EQ(FindMigProfile(*a30, "4g.24gb")->profile_id, 0u);
}

TEST(MigCatalogueTest, NvmlIdsAreDistinctAndKnown) {
  for (const MigModel& model : AllMigModels()) {
    SCOPED_TRACE(model.model->short_name);
    std::set<unsigned> nvml_ids;
    std::set<unsigned> profile_ids;
    for (int i = 0; i < model.profile_count; ++i) {
      EXPECT_TRUE(nvml_ids.insert(model.profiles[i].nvml_id).second);
      EXPECT_TRUE(profile_ids.insert(model.profiles[i].profile_id).second);
      EXPECT_LE(model.profiles[i].nvml_id, 9u);  // NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2
    }
  }
  const MigModel* h100 = FindMigModel("H100-80GB");
  ASSERT_NE(h100, nullptr);
  EXPECT_EQ(FindMigProfile(*h100, "1g.10gb")->nvml_id, 0u);
  EXPECT_EQ(FindMigProfile(*h100, "1g.10gb+me")->nvml_id, 7u);
  EXPECT_EQ(FindMigProfile(*h100, "1g.20gb")->nvml_id, 9u);
  EXPECT_EQ(FindMigProfile(*h100, "2g.20gb")->nvml_id, 1u);
  EXPECT_EQ(FindMigProfile(*h100, "3g.40gb")->nvml_id, 2u);
  EXPECT_EQ(FindMigProfile(*h100, "4g.40gb")->nvml_id, 3u);
  EXPECT_EQ(FindMigProfile(*h100, "7g.80gb")->nvml_id, 4u);
  EXPECT_EQ(FindMigProfile(*h100, "1g.10gb")->profile_id, 19u);
  EXPECT_EQ(FindMigProfile(*h100, "7g.80gb")->profile_id, 0u);
  const MigModel* a30 = FindMigModel("A30-24GB");
  ASSERT_NE(a30, nullptr);
  EXPECT_EQ(FindMigProfile(*a30, "2g.12gb+me")->nvml_id, 8u);
}

TEST(MigCatalogueTest, FindMigModelByModelAndName) {
  const GpuModel* h100 = FindModel("H100-80GB");
  ASSERT_NE(h100, nullptr);
  const MigModel* by_model = FindMigModel(*h100);
  ASSERT_NE(by_model, nullptr);
  EXPECT_EQ(by_model->model, h100);
  EXPECT_EQ(FindMigModel("h100-80gb"), by_model);
  EXPECT_EQ(FindMigModel("H100-80GB"), by_model);
  // A copy of the catalogue entry is found by its short name.
  const GpuModel copy = *h100;
  EXPECT_EQ(FindMigModel(copy), by_model);
  EXPECT_EQ(FindMigModel("H100"), nullptr);
  EXPECT_EQ(FindMigModel(""), nullptr);
  EXPECT_EQ(FindMigModel("nonsense"), nullptr);
}

TEST(MigCatalogueTest, NewHopperVariantsAreInTheCatalogue) {
  const GpuModel* nvl = FindModelByNvmlName("NVIDIA H100 NVL");
  ASSERT_NE(nvl, nullptr);
  EXPECT_EQ(nvl->short_name, "H100-94GB");
  EXPECT_EQ(nvl->pci_device_id, 0x2321);
  const GpuModel* gh200 = FindModelByNvmlName("NVIDIA GH200 480GB");
  ASSERT_NE(gh200, nullptr);
  EXPECT_EQ(gh200->short_name, "GH200-96GB");
  EXPECT_NE(FindMigModel(*nvl), nullptr);
  EXPECT_NE(FindMigModel(*gh200), nullptr);
}

TEST(MigCatalogueTest, NonMigModelsHaveNone) {
  for (const char* name : {"L4", "T4"}) {
    const GpuModel* model = FindModel(name);
    ASSERT_NE(model, nullptr) << name;
    EXPECT_EQ(FindMigModel(*model), nullptr) << name;
    EXPECT_EQ(FindMigModel(name), nullptr) << name;
  }
}

TEST(MigCatalogueTest, FindMigProfileIgnoresCaseAndRejectsUnknown) {
  const MigModel* h100 = FindMigModel("H100-80GB");
  ASSERT_NE(h100, nullptr);
  const MigProfile* p = FindMigProfile(*h100, "3G.40GB");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->compute_slices, 3);
  const MigProfile* me = FindMigProfile(*h100, "1g.10GB+ME");
  ASSERT_NE(me, nullptr);
  EXPECT_TRUE(me->media_extensions);
  EXPECT_EQ(FindMigProfile(*h100, "1g.10gb"), &h100->profiles[0]);
  EXPECT_EQ(FindMigProfile(*h100, "1g.5gb"), nullptr);    // An A100-40GB profile.
  EXPECT_EQ(FindMigProfile(*h100, "3g.40gb "), nullptr);  // No trimming.
  EXPECT_EQ(FindMigProfile(*h100, ""), nullptr);
  EXPECT_EQ(FindMigProfile(*h100, std::string(200, 'g')), nullptr);
}

TEST(MigCatalogueTest, FormatMigProfileNameRespectsTheBuffer) {
  const MigModel* h200 = FindMigModel("H200-141GB");
  ASSERT_NE(h200, nullptr);
  const MigProfile& full = h200->profiles[h200->profile_count - 1];  // "7g.141gb": 8 chars.
  char buf[16];
  EXPECT_EQ(FormatMigProfileName(*h200, full, buf, sizeof(buf)), 8u);
  EXPECT_STREQ(buf, "7g.141gb");
  EXPECT_EQ(FormatMigProfileName(*h200, full, buf, 9), 8u);  // Exactly room for the NUL.
  EXPECT_STREQ(buf, "7g.141gb");
  EXPECT_EQ(FormatMigProfileName(*h200, full, buf, 8), 0u);  // No room for the NUL.
  EXPECT_EQ(FormatMigProfileName(*h200, full, buf, 3), 0u);
  EXPECT_EQ(FormatMigProfileName(*h200, full, buf, 0), 0u);
  const MigProfile& me = h200->profiles[1];  // "1g.18gb+me": 10 chars.
  EXPECT_EQ(FormatMigProfileName(*h200, me, buf, 10), 0u);
  EXPECT_EQ(FormatMigProfileName(*h200, me, buf, 11), 10u);
  EXPECT_STREQ(buf, "1g.18gb+me");
}

}  // namespace
}  // namespace gpufrac::gpu
