// The node agent serving NVIDIA's resource names on simulated GPUs, against a fake API server and
// a fake kubelet: nvidia.com/gpu for --nvidia-gpus (GPU UUIDs as device ids) and
// nvidia.com/mig-<profile> for the existing instances of --static-mig-gpus (MIG UUIDs), Allocate
// answering with those ids, those GPUs left out of gpufrac's inventory and slots, and the flag
// combinations the agent refuses.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>

#include "common/paths.h"
#include "gpu/mig_catalogue.h"
#include "k8s/agent_service.h"
#include "k8s/api_client.h"
#include "k8s/fake_apiserver.h"
#include "k8s/fake_kubelet.h"
#include "k8s/inventory.h"
#include "k8s/nvidia_provider.h"
#include "k8s/object_fields.h"
#include "machine/node_gpus.h"
#include "simgpu/shared_machine.h"

namespace gpufrac::k8s {
namespace {

using testing::FakeApiServer;
using testing::FakeKubelet;
using ::testing::HasSubstr;
using testing::KubeletClient;
using testing::TempDir;

constexpr char kNode[] = "gpu-node-1";
// GPUs 0 and 1: H100s; GPU 2: an A100-40GB in MIG mode.
constexpr char kSim[] = "2xH100-80GB,1xA100-40GB:mig";

class NvidiaResourcesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("GPUFRAC_SIMGPU_DIR", GPUFRAC_SIMGPU_DIR, 1);
    auto server = FakeApiServer::Start();
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server);
    server_->Put({{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", kNode}}}});
    auto client = ApiClient::Create(server_->client_config());
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    client_ = std::move(*client);
    kubelet_ = std::make_unique<FakeKubelet>(kubelet_dir_.path());
    ASSERT_TRUE(kubelet_->Start().ok());
    // Device nodes for GPUs 1 and 2 only, and the control node.
    std::filesystem::create_directories(dev_dir());
    for (const char* n : {"nvidiactl", "nvidia1", "nvidia2"}) std::ofstream(dev_dir() + "/" + n);
  }

  void TearDown() override {
    if (agent_) agent_->Stop();
    simgpu::RemoveSharedMachine("k8s-" + StateDirTag(host_dir_.path()));
  }

  std::string dev_dir() const { return host_dir_.path() + "/dev"; }

  // The simulated machine the agent will open, opened first by the test (to make MIG instances
  // as an operator would with nvidia-smi or mig-parted).
  machine::NodeGpus& Machine() {
    if (!machine_) {
      std::string warning;
      auto gpus = machine::OpenNodeGpus(
          {.sim = kSim, .sim_namespace = "k8s-" + StateDirTag(host_dir_.path()), .whole_gpus = {}},
          &warning);
      EXPECT_TRUE(gpus.ok()) << gpus.status().ToString();
      machine_ = std::move(*gpus);
    }
    return *machine_;
  }

  // Creates an instance of `profile` at its `nth` legal placement on MIG GPU 2; its MIG UUID.
  std::string MakeInstance(const std::string& profile, int nth) {
    machine::NodeGpus& m = Machine();
    const gpu::MigModel* model = m.mig_models.at(2);
    const gpu::MigProfile* p = gpu::FindMigProfile(*model, profile);
    EXPECT_NE(p, nullptr) << profile;
    auto made = m.mig_backend->Create(2, static_cast<int>(p - model->profiles), p->starts[nth]);
    EXPECT_TRUE(made.ok()) << made.status().ToString();
    return made.ok() ? made->uuid : "";
  }

  Status StartAgent(std::vector<int> nvidia_gpus, std::vector<int> static_mig_gpus) {
    AgentServiceOptions options;
    options.agent.node = kNode;
    options.agent.slots_per_gpu = 4;
    options.agent.host_dir = host_dir_.path();
    options.agent.dev_dir = dev_dir();
    options.kubelet_dir = kubelet_dir_.path();
    options.sim = kSim;
    options.limiter_path = std::string(GPUFRAC_BUILD_DIR) + "/lib/libgpufrac.so";
    options.nvidia_gpus = std::move(nvidia_gpus);
    options.static_mig_gpus = std::move(static_mig_gpus);
    auto agent = AgentService::Create(client_.get(), options);
    if (!agent.ok()) return agent.status();
    agent_ = std::move(*agent);
    return agent_->Start();
  }

  // Resource name -> the endpoint it registered last.
  std::map<std::string, std::string> Registered() {
    std::map<std::string, std::string> out;
    for (const auto& r : kubelet_->registrations()) out[r.resource_name()] = r.endpoint();
    return out;
  }

  // The device ids (and health) the kubelet first hears of for `resource`.
  std::map<std::string, std::string> DeviceList(const std::string& resource) {
    KubeletClient kubelet(kubelet_dir_.path(), Registered().at(resource));
    kubelet.StartListAndWatch();
    auto list = kubelet.NextDeviceList(std::chrono::seconds(5));
    EXPECT_TRUE(list.has_value()) << resource;
    std::map<std::string, std::string> out;
    if (list) {
      for (const auto& d : list->devices()) out[d.id()] = d.health();
    }
    return out;
  }

  grpc::Status Allocate(const std::string& resource, const std::vector<std::string>& ids,
                        v1beta1::ContainerAllocateResponse* out) {
    KubeletClient kubelet(kubelet_dir_.path(), Registered().at(resource));
    v1beta1::AllocateResponse response;
    grpc::Status s = kubelet.Allocate({ids}, &response);
    if (s.ok()) *out = response.container_responses(0);
    return s;
  }

  NodeInventory Published() {
    std::optional<json> node = server_->Get("nodes", "", kNode);
    EXPECT_TRUE(node.has_value());
    auto inv = InventoryFromJson(json::parse(AnnotationOf(*node, kAnnotationInventory)));
    EXPECT_TRUE(inv.ok()) << inv.status().ToString();
    return inv.ok() ? *inv : NodeInventory{};
  }

  TempDir kubelet_dir_;
  TempDir host_dir_;
  std::unique_ptr<FakeApiServer> server_;
  std::unique_ptr<ApiClient> client_;
  std::unique_ptr<FakeKubelet> kubelet_;
  std::unique_ptr<machine::NodeGpus> machine_;
  std::unique_ptr<AgentService> agent_;
};

TEST_F(NvidiaResourcesTest, WholeGpusAndStaticMigInstancesAreServedUnderNvidiasNames) {
  const std::string small_a = MakeInstance("1g.5gb", 0);
  const std::string small_b = MakeInstance("1g.5gb", 1);
  const std::string big = MakeInstance("3g.20gb", 1);  // Slices 4-7.
  const std::string gpu1 = Machine().inventory.gpus.at(1).uuid;
  ASSERT_EQ(gpu1.rfind("GPU-", 0), 0u) << gpu1;

  Status started = StartAgent({1}, {2});
  ASSERT_TRUE(started.ok()) << started.ToString();
  ASSERT_TRUE(kubelet_->WaitForRegistrations(4, std::chrono::seconds(5)));
  std::map<std::string, std::string> registered = Registered();
  std::set<std::string> names;
  for (const auto& [name, endpoint] : registered) names.insert(name);
  EXPECT_EQ(names, (std::set<std::string>{"gpufrac.io/gpu", "nvidia.com/gpu",
                                          "nvidia.com/mig-1g.5gb", "nvidia.com/mig-3g.20gb"}));
  EXPECT_EQ(registered["nvidia.com/gpu"], "gpufrac-nvidia-gpu.sock");
  EXPECT_EQ(registered["nvidia.com/mig-1g.5gb"], "gpufrac-nvidia-mig-1g.5gb.sock");

  // Device ids are the UUIDs, as NVIDIA's plugin gives them.
  EXPECT_EQ(DeviceList("nvidia.com/gpu"), (std::map<std::string, std::string>{{gpu1, "Healthy"}}));
  EXPECT_EQ(DeviceList("nvidia.com/mig-1g.5gb"),
            (std::map<std::string, std::string>{{small_a, "Healthy"}, {small_b, "Healthy"}}));
  EXPECT_EQ(DeviceList("nvidia.com/mig-3g.20gb"),
            (std::map<std::string, std::string>{{big, "Healthy"}}));

  // gpufrac's own resource and inventory keep GPU 0 only.
  std::map<std::string, std::string> slots = DeviceList("gpufrac.io/gpu");
  EXPECT_EQ(slots.size(), 4u);
  for (const auto& [id, health] : slots) EXPECT_EQ(id.rfind("gpu0-", 0), 0u) << id;
  NodeInventory inv = Published();
  ASSERT_EQ(inv.gpus.size(), 1u);
  EXPECT_EQ(inv.gpus[0].index, 0);
  EXPECT_EQ(agent_->inventory(), inv);
  json labels = (*server_->Get("nodes", "", kNode))["metadata"]["labels"];
  EXPECT_EQ(labels["nvidia.com/gpu.count"], "3") << "the labels describe the whole node";
  EXPECT_EQ(labels["gpufrac.io/nvidia-gpu-plugin"], "true");

  // Allocate: the ids as CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES, the device nodes that
  // exist, no limiter.
  v1beta1::ContainerAllocateResponse c;
  grpc::Status s = Allocate("nvidia.com/gpu", {gpu1}, &c);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(c.envs().at("CUDA_VISIBLE_DEVICES"), gpu1);
  EXPECT_EQ(c.envs().at("NVIDIA_VISIBLE_DEVICES"), gpu1);
  EXPECT_EQ(c.mounts_size(), 0);
  std::set<std::string> devices;
  for (const auto& d : c.devices()) devices.insert(d.container_path());
  EXPECT_EQ(devices, (std::set<std::string>{"/dev/nvidiactl", "/dev/nvidia1"}));

  s = Allocate("nvidia.com/mig-1g.5gb", {small_b, small_a}, &c);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(c.envs().at("NVIDIA_VISIBLE_DEVICES"), small_b + "," + small_a);
  EXPECT_EQ(c.envs().at("CUDA_VISIBLE_DEVICES"), small_b + "," + small_a);
  devices.clear();
  for (const auto& d : c.devices()) devices.insert(d.container_path());
  EXPECT_EQ(devices, (std::set<std::string>{"/dev/nvidiactl", "/dev/nvidia2"}));

  s = Allocate("nvidia.com/mig-3g.20gb", {small_a}, &c);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
}

TEST_F(NvidiaResourcesTest, AResyncServesInstancesMadeLater) {
  const std::string first = MakeInstance("1g.5gb", 0);
  ASSERT_TRUE(StartAgent({}, {2}).ok());
  ASSERT_TRUE(kubelet_->WaitForRegistrations(2, std::chrono::seconds(5)));
  EXPECT_EQ(Registered().count("nvidia.com/gpu"), 0u) << "no --nvidia-gpus, no nvidia.com/gpu";
  const std::string later = MakeInstance("2g.10gb", 1);  // Slices 2-3.
  ASSERT_TRUE(agent_->Resync().ok());
  ASSERT_TRUE(kubelet_->WaitForRegistrations(3, std::chrono::seconds(5)));
  EXPECT_EQ(DeviceList("nvidia.com/mig-2g.10gb"),
            (std::map<std::string, std::string>{{later, "Healthy"}}));
  EXPECT_EQ(DeviceList("nvidia.com/mig-1g.5gb"),
            (std::map<std::string, std::string>{{first, "Healthy"}}));
  json labels = (*server_->Get("nodes", "", kNode))["metadata"]["labels"];
  EXPECT_FALSE(labels.contains("gpufrac.io/nvidia-gpu-plugin"));
}

TEST_F(NvidiaResourcesTest, RefusesGpusThatCannotBeServedSo) {
  struct Case {
    std::vector<int> nvidia, mig;
    std::string says;
  };
  for (const Case& c : std::vector<Case>{
           {{7}, {}, "--nvidia-gpus: GPU 7: this node has no such GPU"},
           {{}, {9}, "--static-mig-gpus: GPU 9: this node has no such GPU"},
           {{1}, {1}, "--static-mig-gpus: GPU 1 is also in --nvidia-gpus"},
           {{}, {0}, "--static-mig-gpus: GPU 0 is not in MIG mode"},
           {{2}, {}, "--nvidia-gpus: GPU 2 is in MIG mode"},
       }) {
    Status s = StartAgent(c.nvidia, c.mig);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.says;
    EXPECT_THAT(s.message(), HasSubstr(c.says));
    EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message();
    agent_->Stop();
  }
  EXPECT_TRUE(kubelet_->registrations().empty());
  EXPECT_TRUE(AnnotationOf(*server_->Get("nodes", "", kNode), kAnnotationInventory).empty())
      << "nothing is published for a configuration that is refused";
}

// ---- The pieces, without a kubelet ----

TEST(NvidiaNamesTest, ResourceAndSocketNames) {
  EXPECT_EQ(NvidiaMigResource("1g.10gb"), "nvidia.com/mig-1g.10gb");
  EXPECT_EQ(NvidiaMigResource("1g.10gb+me"), "nvidia.com/mig-1g.10gb.me");
  EXPECT_EQ(NvidiaSocketName("nvidia.com/gpu"), "gpufrac-nvidia-gpu.sock");
  EXPECT_EQ(NvidiaSocketName("nvidia.com/mig-1g.10gb"), "gpufrac-nvidia-mig-1g.10gb.sock");
}

TEST(NvidiaNamesTest, DevicesAreAsHealthyAsTheirGpu) {
  GpuInfo whole, mig;
  whole.index = 0;
  whole.uuid = "GPU-0";
  whole.healthy = false;
  mig.index = 1;
  mig.uuid = "GPU-1";
  mig.mode = GpuMode::kMig;
  mig.healthy = false;
  for (const char* profile : {"1g.10gb", "1g.10gb+me"}) {
    MigInstanceInfo m;
    m.profile = profile;
    m.start = static_cast<int>(mig.mig.size());
    m.size = 1;
    m.uuid = mig.mig.empty() ? "MIG-a" : "MIG-b";
    mig.mig.push_back(m);
  }
  NodeInventory all;
  all.gpus = {whole, mig};
  auto resources = NvidiaResources(all, {.whole = {0}, .static_mig = {1}});
  EXPECT_EQ(resources["nvidia.com/gpu"], (std::vector<NvidiaDevice>{{"GPU-0", 0, false}}));
  EXPECT_EQ(resources["nvidia.com/mig-1g.10gb"], (std::vector<NvidiaDevice>{{"MIG-a", 1, false}}));
  EXPECT_EQ(resources["nvidia.com/mig-1g.10gb.me"],
            (std::vector<NvidiaDevice>{{"MIG-b", 1, false}}));
  EXPECT_EQ(resources.size(), 3u);
}

}  // namespace
}  // namespace gpufrac::k8s
