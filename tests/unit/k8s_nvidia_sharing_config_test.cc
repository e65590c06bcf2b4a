// NVIDIA's device plugin configuration file as the node agent reads it: the sharing section of
// good files in their several spellings, one-line errors naming the file, line and field for bad
// ones, and the configuration matched to a node's --nvidia-gpus.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "k8s/nvidia_sharing_config.h"

namespace gpufrac::k8s {
namespace {

using ::testing::HasSubstr;

constexpr char kUuid1[] = "GPU-11111111-2222-3333-4444-555555555555";

StatusOr<NvidiaSharingConfig> Parse(const std::string& text) {
  return ParseNvidiaSharingConfig(text, "cfg.yaml");
}

NvidiaSharingConfig ParseOk(const std::string& text) {
  StatusOr<NvidiaSharingConfig> config = Parse(text);
  EXPECT_TRUE(config.ok()) << config.status().ToString();
  return config.ok() ? *config : NvidiaSharingConfig{};
}

TEST(NvidiaSharingConfigTest, ReadsNvidiasTimeSlicingExample) {
  // As NVIDIA's documentation writes it, flags included.
  NvidiaSharingConfig c = ParseOk(R"(version: v1
flags:
  migStrategy: none
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      replicas: 4
)");
  EXPECT_EQ(c.kind, NvidiaSharingKind::kTimeSlicing);
  EXPECT_FALSE(c.rename_by_default);
  EXPECT_FALSE(c.fail_requests_greater_than_one);
  ASSERT_EQ(c.resources.size(), 1u);
  const NvidiaReplicatedResource& r = c.resources[0];
  EXPECT_EQ(r.name, "nvidia.com/gpu");
  EXPECT_EQ(r.serve_as, "nvidia.com/gpu");
  EXPECT_EQ(r.replicas, 4);
  EXPECT_EQ(r.devices, NvidiaReplicatedDevices{});
  EXPECT_TRUE(r.devices.all);
  EXPECT_EQ(r.at, "cfg.yaml:7");
  EXPECT_EQ(r.field, "sharing.timeSlicing.resources[0]");
  ASSERT_EQ(c.notices.size(), 1u);
  EXPECT_THAT(c.notices[0], HasSubstr("cfg.yaml:3: flags: not used"));
}

TEST(NvidiaSharingConfigTest, RenamesAndFlags) {
  NvidiaSharingConfig c = ParseOk(R"(version: v1
sharing:
  timeSlicing:
    renameByDefault: true
    failRequestsGreaterThanOne: true
    resources:
    - name: gpu
      replicas: 2
      devices: [0]
    - name: nvidia.com/gpu
      rename: gpu.small
      replicas: 8
      devices: [2, "3", GPU-11111111-2222-3333-4444-555555555555]
)");
  EXPECT_TRUE(c.rename_by_default);
  EXPECT_TRUE(c.fail_requests_greater_than_one);
  ASSERT_EQ(c.resources.size(), 2u);
  // A name without a domain is NVIDIA's; renameByDefault appends .shared; rename wins over it.
  EXPECT_EQ(c.resources[0].name, "nvidia.com/gpu");
  EXPECT_EQ(c.resources[0].serve_as, "nvidia.com/gpu.shared");
  EXPECT_EQ(c.resources[1].serve_as, "nvidia.com/gpu.small");
  EXPECT_EQ(c.resources[1].devices.list, (std::vector<std::string>{"2", "3", kUuid1}));
  EXPECT_FALSE(c.resources[1].devices.all);
  // NVIDIA's plugin serves every GPU as nvidia.com/gpu.shared here, whatever rename and devices
  // say: the log tells where gpufrac differs.
  EXPECT_EQ(c.notices,
            (std::vector<std::string>{
                "cfg.yaml:9: sharing.timeSlicing.resources[0].devices: NVIDIA's plugin ignores "
                "this and shares every GPU; gpufrac shares only these and serves the others whole",
                "cfg.yaml:13: sharing.timeSlicing.resources[1].devices: NVIDIA's plugin ignores "
                "this and shares every GPU; gpufrac shares only these and serves the others whole",
                "cfg.yaml:11: sharing.timeSlicing.resources[1].rename: NVIDIA's plugin ignores "
                "this and serves the replicas as nvidia.com/gpu.shared; gpufrac serves them as "
                "nvidia.com/gpu.small"}));
}

TEST(NvidiaSharingConfigTest, DevicesAsACountAndRenameWithoutRenameByDefault) {
  NvidiaSharingConfig c = ParseOk(R"(sharing:
  timeSlicing:
    resources:
    - {name: nvidia.com/gpu, replicas: 3, devices: 2, rename: nvidia.com/gpu.third}
)");
  ASSERT_EQ(c.resources.size(), 1u);
  EXPECT_EQ(c.resources[0].devices.count, 2);
  EXPECT_FALSE(c.resources[0].devices.all);
  EXPECT_EQ(c.resources[0].serve_as, "nvidia.com/gpu.third");
}

TEST(NvidiaSharingConfigTest, MpsRefusesSeveralReplicasUnlessTold) {
  NvidiaSharingConfig mps = ParseOk(R"(version: v1
sharing:
  mps:
    resources:
    - name: nvidia.com/gpu
      replicas: 10
)");
  EXPECT_EQ(mps.kind, NvidiaSharingKind::kMps);
  EXPECT_TRUE(mps.fail_requests_greater_than_one) << "NVIDIA's default under mps";
  EXPECT_EQ(mps.resources.at(0).field, "sharing.mps.resources[0]");
  NvidiaSharingConfig relaxed = ParseOk(R"(sharing:
  mps:
    failRequestsGreaterThanOne: false
    resources: [{name: nvidia.com/gpu, replicas: 2}]
)");
  EXPECT_FALSE(relaxed.fail_requests_greater_than_one);
}

TEST(NvidiaSharingConfigTest, JsonAndEmptyFiles) {
  NvidiaSharingConfig json = ParseOk(
      R"({"version": "v1", "sharing": {"timeSlicing": {"renameByDefault": true,
          "resources": [{"name": "nvidia.com/gpu", "replicas": 5}]}}})");
  ASSERT_EQ(json.resources.size(), 1u);
  EXPECT_EQ(json.resources[0].serve_as, "nvidia.com/gpu.shared");
  // As in NVIDIA's plugin: no file content, or no sharing section, shares nothing.
  EXPECT_TRUE(ParseOk("").resources.empty());
  EXPECT_TRUE(ParseOk("version: v1\nflags: {migStrategy: mixed}\n").resources.empty());
  EXPECT_TRUE(ParseOk("version: v1\nsharing:\n").resources.empty());
}

TEST(NvidiaSharingConfigTest, BadFilesSayWhereAndWhatToWrite) {
  const std::string head = "version: v1\nsharing:\n  timeSlicing:\n    resources:\n";
  struct Case {
    std::string text;
    std::string says;
  };
  for (const Case& c : std::vector<Case>{
           {"version: v2\n",
            "cfg.yaml:1: version: gpufrac reads version v1 of NVIDIA's format only"},
           {"version: v1\nsharng: {}\n", "cfg.yaml:2: the top level: unknown field \"sharng\""},
           {"sharing: [\n", "cfg.yaml:2: not valid YAML or JSON"},
           {"- a\n", "cfg.yaml:1: the top level: must be a map"},
           {"sharing:\n  timeslicing: {}\n", "cfg.yaml:2: sharing: unknown field \"timeslicing\""},
           {head + "    - name: nvidia.com/gpu\n      replica: 4\n",
            "cfg.yaml:6: sharing.timeSlicing.resources[0]: unknown field \"replica\""},
           {head + "    - name: nvidia.com/gpu\n      replicas: 0\n",
            "cfg.yaml:6: sharing.timeSlicing.resources[0].replicas: must be a whole number "
            "from 1 to 1000 (write e.g. \"replicas: 4\")"},
           {head + "    - name: nvidia.com/gpu\n      replicas: four\n",
            "resources[0].replicas: must be a whole number"},
           {head + "    - name: nvidia.com/gpu\n      replicas: 1001\n",
            "resources[0].replicas: must be a whole number"},
           {head + "    - name: nvidia.com/gpu\n",
            "cfg.yaml:5: sharing.timeSlicing.resources[0].replicas: missing"},
           {head + "    - replicas: 2\n", "resources[0].name: missing"},
           {head + "    - name: nvidia.com/mig-1g.10gb\n      replicas: 2\n",
            "cfg.yaml:5: sharing.timeSlicing.resources[0].name: nvidia.com/mig-1g.10gb is a MIG "
            "resource"},
           {head + "    - name: example.com/tpu\n      replicas: 2\n",
            "resources[0].name: \"example.com/tpu\" is not a resource name under nvidia.com/"},
           {head + "    - name: nvidia.com/tpu\n      replicas: 2\n",
            "nvidia.com/tpu is not a resource gpufrac's agent serves"},
           {head + "    - name: nvidia.com/gpu\n      replicas: 2\n      rename: Big_GPU\n",
            "cfg.yaml:7: sharing.timeSlicing.resources[0].rename: \"Big_GPU\" is not a resource "
            "name"},
           {head + "    - name: nvidia.com/gpu\n      replicas: 2\n      rename: mig-1g.5gb\n",
            "resources[0].rename: nvidia.com/mig-1g.5gb is the name of a MIG resource"},
           {head + "    - name: nvidia.com/gpu\n      replicas: 2\n      devices: some\n",
            "cfg.yaml:7: sharing.timeSlicing.resources[0].devices: must be all, a number of "
            "GPUs, or a list"},
           {head + "    - name: nvidia.com/gpu\n      replicas: 2\n      devices: [0, \"0:1\"]\n",
            "resources[0].devices[1]: \"0:1\" is a MIG device"},
           {head + "    - name: nvidia.com/gpu\n      replicas: 2\n      devices: [MIG-abc]\n",
            "resources[0].devices[0]: \"MIG-abc\" is a MIG device"},
           {head + "    - name: nvidia.com/gpu\n      replicas: 2\n      devices: [GPU-12]\n",
            "resources[0].devices[0]: \"GPU-12\" is neither a GPU index"},
           {"sharing:\n  timeSlicing:\n    resources: []\n",
            "cfg.yaml:3: sharing.timeSlicing.resources: must list at least one resource"},
           {"sharing:\n  mps:\n    renameByDefault: maybe\n    resources: []\n",
            "cfg.yaml:3: sharing.mps.renameByDefault: must be true or false"},
           {"sharing:\n  timeSlicing: {resources: [{name: gpu, replicas: 2}]}\n  mps: {}\n",
            "cfg.yaml:2: sharing: has both timeSlicing and mps"},
       }) {
    StatusOr<NvidiaSharingConfig> config = Parse(c.text);
    ASSERT_FALSE(config.ok()) << c.text;
    EXPECT_EQ(config.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(config.status().message(), HasSubstr(c.says)) << c.text;
    EXPECT_EQ(config.status().message().find('\n'), std::string::npos) << config.status().message();
  }
}

TEST(NvidiaSharingConfigTest, AFileThatCannotBeReadIsNamed) {
  StatusOr<NvidiaSharingConfig> config = LoadNvidiaSharingConfig("/nonexistent/config.yaml");
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(),
              HasSubstr("--nvidia-sharing-config /nonexistent/config.yaml: cannot read it"));
}

// ---- Matched to a node ----

// GPUs 0 to 3; GPU 1 has kUuid1.
NodeInventory FourGpus() {
  NodeInventory all;
  for (int i = 0; i < 4; ++i) {
    GpuInfo g;
    g.index = i;
    g.uuid = i == 1 ? kUuid1 : "GPU-" + std::to_string(i);
    all.gpus.push_back(g);
  }
  return all;
}

TEST(NvidiaSharingConfigTest, SharesTheGpusOfNvidiaGpusAsTheEntriesSay) {
  NvidiaSharingConfig c = ParseOk(R"(sharing:
  timeSlicing:
    failRequestsGreaterThanOne: true
    resources:
    - {name: nvidia.com/gpu, replicas: 2, devices: [3]}
    - {name: nvidia.com/gpu, replicas: 4, rename: gpu.shared, devices: [GPU-11111111-2222-3333-4444-555555555555]}
)");
  StatusOr<NvidiaSharing> s = ResolveNvidiaSharing(c, FourGpus(), {3, 1, 2});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->kind, NvidiaSharingKind::kTimeSlicing);
  EXPECT_TRUE(s->fail_requests_greater_than_one);
  EXPECT_EQ(s->gpus, (std::map<int, NvidiaSharedGpu>{{1, {"nvidia.com/gpu.shared", 4}},
                                                     {3, {"nvidia.com/gpu", 2}}}))
      << "GPU 2 is not listed: it stays whole";

  // all: every GPU of --nvidia-gpus; a count: the first ones by index.
  NvidiaSharingConfig every = ParseOk("sharing: {mps: {resources: [{name: gpu, replicas: 3}]}}");
  s = ResolveNvidiaSharing(every, FourGpus(), {2, 1});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->kind, NvidiaSharingKind::kMps);
  EXPECT_EQ(s->gpus, (std::map<int, NvidiaSharedGpu>{{1, {"nvidia.com/gpu", 3}},
                                                     {2, {"nvidia.com/gpu", 3}}}));
  NvidiaSharingConfig two =
      ParseOk("sharing: {timeSlicing: {resources: [{name: gpu, replicas: 3, devices: 2}]}}");
  s = ResolveNvidiaSharing(two, FourGpus(), {3, 0, 2});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->gpus, (std::map<int, NvidiaSharedGpu>{{0, {"nvidia.com/gpu", 3}},
                                                     {2, {"nvidia.com/gpu", 3}}}));

  // No sharing section: nothing shared, whatever the node.
  s = ResolveNvidiaSharing(NvidiaSharingConfig{}, FourGpus(), {});
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->gpus.empty());
}

TEST(NvidiaSharingConfigTest, RefusesEntriesThatDoNotFitTheNode) {
  auto entry = [](const std::string& devices) {
    return "sharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n"
           "      replicas: 2\n      devices: " +
           devices + "\n";
  };
  struct Case {
    std::string text;
    std::vector<int> nvidia_gpus;
    std::string says;
  };
  for (const Case& c : std::vector<Case>{
           {entry("all"),
            {},
            "cfg.yaml:4: sharing.timeSlicing.resources[0]: shares nvidia.com/gpu, but this "
            "agent serves no GPU as nvidia.com/gpu; list the GPUs to share in --nvidia-gpus"},
           {entry("3"),
            {1, 2},
            "resources[0].devices: 3 GPUs to share, but only 2 are served as nvidia.com/gpu "
            "(--nvidia-gpus 1,2)"},
           {entry("[0]"),
            {1, 2},
            "resources[0].devices: GPU 0 is not served as nvidia.com/gpu; add 0 to "
            "--nvidia-gpus (now 1,2)"},
           {entry("[7]"), {1, 2}, "resources[0].devices: this node has no GPU 7"},
           {entry("[1, 1]"),
            {1, 2},
            "resources[0].devices: GPU 1 is already shared by sharing.timeSlicing.resources[0]"},
           {entry("[1]") + "    - {name: gpu, replicas: 3}\n",
            {1, 2},
            "cfg.yaml:7: sharing.timeSlicing.resources[1].devices: GPU 1 is already shared by "
            "sharing.timeSlicing.resources[0]; share each GPU in one entry"},
       }) {
    NvidiaSharingConfig config = ParseOk(c.text);
    StatusOr<NvidiaSharing> s = ResolveNvidiaSharing(config, FourGpus(), c.nvidia_gpus);
    ASSERT_FALSE(s.ok()) << c.text;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(s.status().message(), HasSubstr(c.says));
    EXPECT_EQ(s.status().message().find('\n'), std::string::npos) << s.status().message();
  }
}

}  // namespace
}  // namespace gpufrac::k8s
