// The one adapter from a host's GPUs to the placement library (grouping, a request on a group),
// the limits a workload gets on one GPU alone,
// the mix a policy is rebuilt from, and the policy registry.
#include <gtest/gtest.h>

#include "placement/cluster.h"
#include "placement/gpu_share.h"
#include "placement/host_gpus.h"
#include "placement/policies.h"
#include "placement/workload_mix.h"

namespace gpufrac::placement {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr uint64_t kContext = 783 * (uint64_t{1} << 20);

HostGpu H100(bool whole_only = false) { return {"H100-80GB", 80 * kGiB, kContext, whole_only}; }
HostGpu A30() { return {"A30-24GB", 24 * kGiB, 656 * (uint64_t{1} << 20), false}; }

// gpufrac exec and a Slurm step get their limits on one GPU from the same rule.
TEST(OneGpuLimitsTest, AShareGetsItsMemoryAndTheTimeOfItsShareAndAWholeGpuNoComputePair) {
  GpuRequest memory = GpuRequest::Memory(20 * kGiB);
  StatusOr<OneGpuLimits> quarter = LimitsOnOneGpu(memory, 80 * kGiB, kContext, "GPU 0");
  ASSERT_TRUE(quarter.ok()) << quarter.status().ToString();
  EXPECT_EQ(quarter->memory_bytes, 20 * kGiB);
  EXPECT_EQ(quarter->compute, (ComputePair{.request_milli = 250, .limit_milli = 1000}));
  GpuRequest asked = memory;
  asked.compute_milli = 600;
  asked.compute_limit_milli = 500;  // A request above the limit is held to it.
  StatusOr<OneGpuLimits> held = LimitsOnOneGpu(asked, 80 * kGiB, kContext, "GPU 0");
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(held->compute, (ComputePair{.request_milli = 500, .limit_milli = 500}));
  GpuRequest fraction = GpuRequest::Fraction(500);
  EXPECT_EQ(LimitsOnOneGpu(fraction, 80 * kGiB, kContext, "GPU 0")->memory_bytes, 40 * kGiB);
  GpuRequest whole = GpuRequest::Whole(1);
  StatusOr<OneGpuLimits> all = LimitsOnOneGpu(whole, 80 * kGiB, kContext, "GPU 0");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->memory_bytes, 80 * kGiB);
  EXPECT_EQ(all->compute, std::nullopt);
}

TEST(OneGpuLimitsTest, WhatOneGpuCannotGiveIsOneLineNamingIt) {
  GpuRequest big = GpuRequest::Memory(81 * kGiB);
  EXPECT_EQ(LimitsOnOneGpu(big, 80 * kGiB, kContext, "GPU 3 (H100)").status().message(),
            "81 GiB is more than GPU 3 (H100) has: 80 GiB");
  GpuRequest tiny = GpuRequest::Memory(512 << 20);
  EXPECT_EQ(LimitsOnOneGpu(tiny, 80 * kGiB, kContext, "GPU 3 (H100)").status().message(),
            "512 MiB cannot hold even the CUDA context on GPU 3 (H100) (about 783 MiB); "
            "ask for more");
  GpuRequest whole = GpuRequest::Whole(1);
  whole.compute_milli = 500;
  EXPECT_EQ(LimitsOnOneGpu(whole, 80 * kGiB, kContext, "GPU 3 (H100)").status().code(),
            StatusCode::kInvalidArgument);
}

TEST(HostGpusTest, AlikeGpusFormOneGroupInTheOrderTheyFirstAppear) {
  std::vector<GpuGroup> groups = *GroupHostGpus({H100(), A30(), H100(), H100(true), A30()});
  ASSERT_EQ(groups.size(), 3u);
  EXPECT_EQ(groups[0].model, "H100-80GB");
  EXPECT_EQ(groups[0].members, (std::vector<int>{0, 2}));
  EXPECT_EQ(groups[1].model, "A30-24GB");
  EXPECT_EQ(groups[1].members, (std::vector<int>{1, 4}));
  // Whole-only GPUs of the same model are a group of their own.
  EXPECT_TRUE(groups[2].whole_only);
  EXPECT_EQ(groups[2].members, (std::vector<int>{3}));
  EXPECT_EQ(groups[0].model_id, -1);
  EXPECT_TRUE(GroupHostGpus({})->empty());
}

// A placement node holds kMaxGpusPerNode GPUs: a host with more alike ones is refused in words,
// never cut short (gpufracd and the extender both follow this).
TEST(HostGpusTest, MoreAlikeGpusThanAPlacementNodeHoldsAreRefusedNotCutShort) {
  std::vector<HostGpu> gpus(kMaxGpusPerNode, H100());
  gpus.push_back(A30());
  StatusOr<std::vector<GpuGroup>> most = GroupHostGpus(gpus);
  ASSERT_TRUE(most.ok()) << most.status().message();
  EXPECT_EQ((*most)[0].members.size(), static_cast<size_t>(kMaxGpusPerNode));

  gpus.push_back(H100());
  StatusOr<std::vector<GpuGroup>> over = GroupHostGpus(gpus);
  EXPECT_EQ(over.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(over.status().message(), "more than 32 H100-80GB GPUs on one node are not supported");

  std::vector<HostGpu> unknown(kMaxGpusPerNode + 1, HostGpu{.model = "", .memory_bytes = kGiB});
  EXPECT_EQ(GroupHostGpus(unknown).status().message(),
            "more than 32 GPUs of unknown model on one node are not supported");
}

TEST(HostGpusTest, ARequestTakesItsShareOnEachGpuOfAGroup) {
  std::vector<GpuGroup> groups = *GroupHostGpus({H100(), H100(), A30(), H100(true)});
  const GpuGroup& h100 = groups[0];
  const GpuGroup& whole = groups[2];

  std::optional<Request> memory = RequestOnGroup(GpuRequest::Memory(20 * kGiB), h100);
  ASSERT_TRUE(memory);
  EXPECT_EQ(memory->gpu_count, 1u);
  EXPECT_EQ(memory->gpu_milli, 250u);
  EXPECT_EQ(memory->gpu_memory_bytes, 20 * kGiB);
  EXPECT_EQ(memory->models, 0u);

  std::optional<Request> fraction = RequestOnGroup(GpuRequest::Fraction(500, 2), h100);
  ASSERT_TRUE(fraction);
  EXPECT_EQ(fraction->gpu_count, 2u);
  EXPECT_EQ(fraction->gpu_milli, 500u);
  EXPECT_EQ(fraction->gpu_memory_bytes, 40 * kGiB);

  std::optional<Request> all = RequestOnGroup(GpuRequest::Whole(2), h100);
  ASSERT_TRUE(all);
  EXPECT_EQ(all->gpu_milli, 1000u);
  EXPECT_EQ(all->gpu_memory_bytes, 80 * kGiB);
  EXPECT_TRUE(RequestOnGroup(GpuRequest::Whole(1), whole));

  // Where it cannot run at all.
  EXPECT_FALSE(RequestOnGroup(GpuRequest::Whole(3), h100));           // Too many GPUs.
  EXPECT_FALSE(RequestOnGroup(GpuRequest::Memory(81 * kGiB), h100));  // Too big.
  EXPECT_FALSE(RequestOnGroup(GpuRequest::Memory(kContext), h100));   // Only a context.
  EXPECT_FALSE(RequestOnGroup(GpuRequest::Fraction(250), whole));     // Whole-only.
  EXPECT_FALSE(RequestOnGroup(GpuRequest::Mig("1g.10gb"), h100));     // Needs MIG mode.
  EXPECT_FALSE(RequestOnGroup(GpuRequest::Whole(1).OnModel("A30-24GB"), h100));
}

TEST(HostGpusTest, AModelConstrainedRequestNamesTheGroupsModelOnceItHasAnId) {
  GpuGroup h100 = (*GroupHostGpus({H100()}))[0];
  GpuRequest on_h100 = GpuRequest::Fraction(250).OnModel("h100-80gb");  // Case does not matter.
  ASSERT_TRUE(RequestOnGroup(on_h100, h100));
  EXPECT_EQ(RequestOnGroup(on_h100, h100)->models, 0u);  // No id yet: nothing to name.
  h100.model_id = 3;
  EXPECT_EQ(RequestOnGroup(on_h100, h100)->models, ModelSet{1} << 3);
  EXPECT_EQ(RequestOnGroup(GpuRequest::Fraction(250), h100)->models, 0u);
}

// One node of two H100-80GB.
StatusOr<Cluster> TwoH100s() {
  ModelNames names;
  GPUFRAC_RETURN_IF_ERROR(names.Intern("H100-80GB").status());
  return Cluster::Create(std::move(names), {{.name = "n",
                                             .cpu_milli = 1000,
                                             .memory_bytes = 1000,
                                             .model = 0,
                                             .gpu_count = 2,
                                             .gpu_memory_bytes = 80 * kGiB}});
}

TEST(PolicyRegistryTest, EveryPolicyIsMadeFromItsRowAndSaysWhatItNeeds) {
  StatusOr<Cluster> cluster = TwoH100s();
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  TypicalWorkload typical;
  for (const PolicyInfo& info : Policies()) {
    EXPECT_EQ(FindPolicy(info.name), &info);
    auto made = MakePolicy(info.name, {.typical = &typical, .seed = 1, .cluster = &*cluster});
    ASSERT_TRUE(made.ok()) << info.name;
    EXPECT_EQ((*made)->name(), info.name);
    if (info.needs_typical) {
      EXPECT_FALSE(
          MakePolicy(info.name, {.typical = nullptr, .seed = 1, .cluster = &*cluster}).ok());
    }
    if (info.needs_cluster) {
      EXPECT_FALSE(
          MakePolicy(info.name, {.typical = &typical, .seed = 1, .cluster = nullptr}).ok());
    }
  }
  EXPECT_EQ(FindPolicy("nope"), nullptr);
  auto unknown = MakePolicy("nope", {});
  EXPECT_EQ(unknown.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find(PolicyNameList()), std::string::npos);
  EXPECT_NE(FindPolicy(kDefaultPolicy), nullptr);
}

TEST(PolicyWithMixTest, RebuildsWhenTheMixHasMovedEnough) {
  StatusOr<Cluster> cluster = TwoH100s();
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto mixed = PolicyWithMix::Create("fgd", &*cluster);
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  // The first refresh builds it from the mix.
  EXPECT_TRUE(mixed->Refresh(0, &*cluster));
  EXPECT_FALSE(mixed->Refresh(1, &*cluster));
  Request quarter{.gpu_count = 1, .gpu_milli = 250};
  for (int i = 0; i < 63; ++i) {
    mixed->Count(quarter, +1);
    mixed->NoteChange();
  }
  EXPECT_FALSE(mixed->Refresh(2, &*cluster));  // 63 changes: not yet.
  mixed->NoteChange();
  EXPECT_TRUE(mixed->Refresh(3, &*cluster));  // 64.
  // With a maximum age, any change is enough once it has passed.
  mixed->NoteChange();
  EXPECT_FALSE(mixed->Refresh(4, &*cluster, false, 1000));
  EXPECT_TRUE(mixed->Refresh(1003, &*cluster, false, 1000));
  EXPECT_TRUE(mixed->Refresh(1004, &*cluster, /*force=*/true));
  EXPECT_EQ(mixed->policy().name(), "fgd");

  // A policy that measures against no mix is never rebuilt unless forced.
  auto plain = PolicyWithMix::Create("bestfit", &*cluster);
  ASSERT_TRUE(plain.ok());
  for (int i = 0; i < 100; ++i) plain->NoteChange();
  EXPECT_FALSE(plain->Refresh(0, &*cluster));
  EXPECT_FALSE(PolicyWithMix::Create("nope", &*cluster).ok());
}

}  // namespace
}  // namespace gpufrac::placement
