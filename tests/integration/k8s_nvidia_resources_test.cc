// The node agent serving NVIDIA's resource names on simulated GPUs, against a fake API server and
// a fake kubelet: nvidia.com/gpu for --nvidia-gpus (GPU UUIDs as device ids) and
// nvidia.com/mig-<profile> for the existing instances of --static-mig-gpus (MIG UUIDs), Allocate
// answering with those ids, those GPUs left out of gpufrac's inventory and slots, and the flag
// combinations the agent refuses. With NVIDIA's sharing configuration (--nvidia-sharing-config):
// replicas with NVIDIA's ids and names, and containers held to their share by the limiter.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "common/paths.h"
#include "gpu/mig_catalogue.h"
#include "harness.h"
#include "k8s/agent_service.h"
#include "k8s/api_client.h"
#include "k8s/fake_apiserver.h"
#include "k8s/fake_kubelet.h"
#include "k8s/fake_node.h"
#include "k8s/inventory.h"
#include "k8s/nvidia_provider.h"
#include "k8s/object_fields.h"
#include "limiter/budget.h"
#include "limiter/limit_config.h"
#include "machine/node_gpus.h"
#include "service_budget_dir.h"
#include "simgpu/core/shared_machine.h"

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

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class NvidiaResourcesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("GPUFRAC_SIMGPU_DIR", GPUFRAC_SIMGPU_DIR, 1);
    StatusOr<testing::FakeNode> node =
        testing::StartFakeNode(testing::BareNode(kNode), kubelet_dir_.path());
    ASSERT_TRUE(node.ok()) << node.status().ToString();
    server_ = std::move(node->server);
    client_ = std::move(node->client);
    kubelet_ = std::move(node->kubelet);
    // Device nodes for GPUs 1 and 2 only, and the control node.
    std::filesystem::create_directories(dev_dir());
    for (const char* n : {"nvidiactl", "nvidia1", "nvidia2"}) std::ofstream(dev_dir() + "/" + n);
  }

  void TearDown() override {
    if (agent_) agent_->Stop();
    simgpu::RemoveSharedMachine(SimNamespace());
    gpufrac::testing::RemoveRecordedBudgetDir(host_dir_.path() + "/arbiters");
  }

  std::string dev_dir() const { return host_dir_.path() + "/dev"; }
  // The agent's simulated machine (one per host directory).
  std::string SimNamespace() const { return "k8s-" + StateDirTag(host_dir_.path()); }

  // The simulated machine the agent will open, opened first by the test (to make MIG instances
  // as an operator would with nvidia-smi or mig-parted).
  machine::NodeGpus& Machine() {
    if (!machine_) {
      std::string warning;
      auto gpus = machine::OpenNodeGpus(
          {.sim = kSim, .sim_namespace = SimNamespace(), .whole_gpus = {}, .mps_gpus = {}},
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

  // `sharing`: the text of NVIDIA's configuration file for --nvidia-sharing-config ("": none).
  Status StartAgent(std::vector<int> nvidia_gpus, std::vector<int> static_mig_gpus,
                    const std::string& sharing = "") {
    AgentServiceOptions options;
    if (!sharing.empty()) {
      options.nvidia_sharing_config = host_dir_.path() + "/nvidia-config.yaml";
      std::ofstream(options.nvidia_sharing_config) << sharing;
    }
    options.compute_policy = compute_policy_;
    options.agent.node = kNode;
    options.agent.slots_per_gpu = 4;
    options.agent.host_dir = host_dir_.path();
    options.agent.dev_dir = dev_dir();
    options.kubelet_dir = kubelet_dir_.path();
    options.sim = kSim;
    options.limiter_path = std::string(GPUFRAC_BUILD_DIR) + "/lib/libgpufrac.so";
    options.nvidia_gpus = std::move(nvidia_gpus);
    options.static_mig_gpus = std::move(static_mig_gpus);
    options.whole_gpus = whole_gpus_;
    options.mps_gpus = mps_gpus_;
    options.mps_shm_dir = mps_shm_dir_;
    options.mig_strategy = mig_strategy_;
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

  // The host path of the limit file a container gets ("" without one).
  static std::string LimitFile(const v1beta1::ContainerAllocateResponse& c) {
    for (const auto& m : c.mounts()) {
      if (m.container_path() == "/etc/gpufrac/limits") return m.host_path();
    }
    return "";
  }

  // The container's limit file as the limiter reads it.
  static limiter::LimitConfig Limits(const v1beta1::ContainerAllocateResponse& c) {
    limiter::LimitConfig config{};
    const std::string text = ReadFile(LimitFile(c));
    char err[256] = "";
    EXPECT_TRUE(limiter::ParseLimitConfig(text.data(), text.size(), &config, err, sizeof(err)))
        << err << "\n"
        << text;
    return config;
  }

  // Container paths of its mounts.
  static std::set<std::string> Mounted(const v1beta1::ContainerAllocateResponse& c) {
    std::set<std::string> paths;
    for (const auto& m : c.mounts()) paths.insert(m.container_path());
    return paths;
  }

  // cuda_probe run as in the container: the agent's copy of the limiter preloaded, reading the
  // container's limit file, on the agent's simulated GPUs, seeing the container's devices. The
  // budget the limiter makes (a container's own /dev/shm holds it) is removed afterwards.
  gpufrac::testing::RunResult RunInContainer(const v1beta1::ContainerAllocateResponse& c,
                                             std::vector<std::string> args) {
    args.insert(args.begin(), gpufrac::testing::ProbePath());
    gpufrac::testing::RunResult r = gpufrac::testing::RunCommand(
        args, {{"LD_PRELOAD", host_dir_.path() + "/lib/libgpufrac.so"},
               {"GPUFRAC_LIMIT_FILE", LimitFile(c)},
               {"CUDA_VISIBLE_DEVICES", c.envs().at("CUDA_VISIBLE_DEVICES")},
               {"LD_LIBRARY_PATH", GPUFRAC_SIMGPU_DIR},
               {"SIMGPU_NAMESPACE", SimNamespace()},
               {"SIMGPU_CONFIG", kSim}});
    limiter::LimitConfig config = Limits(c);
    for (int g = 0; g < config.gpu_count; ++g) {
      char name[200];
      if (limiter::BudgetName(config.workload, config.gpus[g].uuid, name, sizeof(name))) {
        limiter::Budget::Unlink(name);
      }
    }
    return r;
  }

  NodeInventory Published() {
    std::optional<json> node = server_->Get("nodes", "", kNode);
    EXPECT_TRUE(node.has_value());
    auto inv = InventoryFromJson(json::parse(AnnotationOf(*node, kAnnotationInventory)));
    EXPECT_TRUE(inv.ok()) << inv.status().ToString();
    return inv.ok() ? *inv : NodeInventory{};
  }

  std::string compute_policy_ = "fair";  // --gpu-compute-policy, set before StartAgent.
  std::vector<int> whole_gpus_;          // --whole-gpus, set before StartAgent.
  std::vector<int> mps_gpus_;            // --mps-gpus, set before StartAgent.
  std::string mps_shm_dir_;              // --mps-shm-dir, set before StartAgent.
  std::string mig_strategy_ = "mixed";   // --mig-strategy, set before StartAgent.
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
  const std::string gpu0 = Machine().inventory.gpus.at(0).uuid;
  for (const auto& [id, health] : slots) EXPECT_EQ(id.rfind(gpu0 + "::", 0), 0u) << id;
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

TEST_F(NvidiaResourcesTest, SingleMigStrategyServesInstancesAsNvidiaGpuAndNeverBesideIt) {
  const std::string a = MakeInstance("2g.10gb", 0);
  const std::string b = MakeInstance("2g.10gb", 1);
  mig_strategy_ = "single";
  Status s = StartAgent({1}, {2});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr("--mig-strategy single"));
  EXPECT_THAT(s.message(), HasSubstr("--nvidia-gpus"));
  agent_->Stop();
  mig_strategy_ = "uniform";
  s = StartAgent({}, {2});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr("--mig-strategy uniform: expected mixed or single"));
  EXPECT_TRUE(kubelet_->registrations().empty());

  mig_strategy_ = "single";
  ASSERT_TRUE(StartAgent({}, {2}).ok());
  ASSERT_TRUE(kubelet_->WaitForRegistrations(2, std::chrono::seconds(5)));
  EXPECT_EQ(DeviceList("nvidia.com/gpu"),
            (std::map<std::string, std::string>{{a, "Healthy"}, {b, "Healthy"}}));
  EXPECT_EQ(Registered().count("nvidia.com/mig-2g.10gb"), 0u);
  // A second profile: the layout is no longer uniform, and single serves none of it.
  MakeInstance("1g.5gb", 6);
  ASSERT_TRUE(agent_->Resync().ok());
  EXPECT_TRUE(DeviceList("nvidia.com/gpu").empty());
  json labels = (*server_->Get("nodes", "", kNode))["metadata"]["labels"];
  EXPECT_EQ(labels["nvidia.com/mig.strategy"], "single");
  EXPECT_EQ(labels["nvidia.com/gpu.count"], "3") << "GPUs, not instances, while not uniform";
}

// ---- NVIDIA's sharing configuration ----

constexpr uint64_t kGiB = 1ull << 30;

TEST_F(NvidiaResourcesTest, SharedGpusAreServedAsNvidiasReplicasEachHeldToItsShare) {
  const std::string gpu0 = Machine().inventory.gpus.at(0).uuid;
  const std::string gpu1 = Machine().inventory.gpus.at(1).uuid;
  const uint64_t memory = Machine().inventory.gpus.at(1).memory_bytes;
  // GPU 1 in four, GPU 0 (not listed) whole, as NVIDIA's plugin serves them.
  Status started = StartAgent({0, 1}, {}, R"(version: v1
flags:
  migStrategy: none
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      replicas: 4
      devices: [1]
)");
  ASSERT_TRUE(started.ok()) << started.ToString();
  ASSERT_TRUE(kubelet_->WaitForRegistrations(2, std::chrono::seconds(5)));
  EXPECT_EQ(Registered()["nvidia.com/gpu"], "gpufrac-nvidia-gpu.sock");
  EXPECT_EQ(DeviceList("nvidia.com/gpu"),
            (std::map<std::string, std::string>{{gpu0, "Healthy"},
                                                {gpu1 + "::0", "Healthy"},
                                                {gpu1 + "::1", "Healthy"},
                                                {gpu1 + "::2", "Healthy"},
                                                {gpu1 + "::3", "Healthy"}}));

  // The GPU not listed is allocated whole, as before: no limiter.
  v1beta1::ContainerAllocateResponse whole;
  grpc::Status s = Allocate("nvidia.com/gpu", {gpu0}, &whole);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(whole.envs().at("CUDA_VISIBLE_DEVICES"), gpu0);
  EXPECT_EQ(whole.mounts_size(), 0);

  // One replica: the GPU's UUID (not the replica's id), a quarter of its memory and of its time
  // (the limit per --gpu-compute-policy fair: 1), the limiter and the GPU's arbiter.
  v1beta1::ContainerAllocateResponse one;
  s = Allocate("nvidia.com/gpu", {gpu1 + "::2"}, &one);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(one.envs().at("CUDA_VISIBLE_DEVICES"), gpu1);
  EXPECT_EQ(one.envs().at("NVIDIA_VISIBLE_DEVICES"), gpu1);
  EXPECT_EQ(one.envs().count("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), 0u);
  EXPECT_EQ(Mounted(one),
            (std::set<std::string>{"/etc/gpufrac/limits", "/usr/local/gpufrac/libgpufrac.so",
                                   "/etc/ld.so.preload", "/etc/gpufrac/compute." + gpu1}));
  limiter::LimitConfig limits = Limits(one);
  ASSERT_EQ(limits.gpu_count, 1);
  EXPECT_STREQ(limits.gpus[0].uuid, gpu1.c_str());
  EXPECT_EQ(limits.gpus[0].limit_bytes, memory / 4);
  EXPECT_EQ(limits.gpus[0].compute_milli, 250u);
  EXPECT_EQ(limits.gpus[0].compute_limit_milli, 1000u);
  EXPECT_STREQ(limits.arbiter_dir, "/etc/gpufrac");

  // Two replicas of the same GPU: half of it.
  v1beta1::ContainerAllocateResponse two;
  s = Allocate("nvidia.com/gpu", {gpu1 + "::0", gpu1 + "::3"}, &two);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(two.envs().at("CUDA_VISIBLE_DEVICES"), gpu1) << "each GPU once";
  limits = Limits(two);
  ASSERT_EQ(limits.gpu_count, 1);
  EXPECT_EQ(limits.gpus[0].limit_bytes, memory / 2);
  EXPECT_EQ(limits.gpus[0].compute_milli, 500u);
  EXPECT_NE(LimitFile(one), LimitFile(two)) << "each container has its own limit file";
  EXPECT_NE(std::string(Limits(one).workload), std::string(limits.workload));

  // The limit file limits: a CUDA program in the first container sees a GPU of a quarter of
  // the memory, and cannot allocate past it.
  gpufrac::testing::RunResult info = RunInContainer(one, {"info"});
  ASSERT_EQ(info.status, 0) << info.err;
  EXPECT_EQ(info.GetInt("total"), static_cast<long long>(memory / 4));
  gpufrac::testing::RunResult over =
      RunInContainer(one, {"alloc", "mem", std::to_string(memory / 4 + 1)});
  EXPECT_EQ(over.GetInt("alloc"), 2) << "CUDA_ERROR_OUT_OF_MEMORY expected\n" << over.err;
  gpufrac::testing::RunResult fits = RunInContainer(one, {"alloc", "mem", std::to_string(kGiB)});
  EXPECT_EQ(fits.GetInt("alloc"), 0) << fits.err;
}

TEST_F(NvidiaResourcesTest, RenamedReplicasAreServedAsGpuSharedAndOfSeveralGpus) {
  const std::string gpu0 = Machine().inventory.gpus.at(0).uuid;
  const std::string gpu1 = Machine().inventory.gpus.at(1).uuid;
  const uint64_t memory = Machine().inventory.gpus.at(0).memory_bytes;
  Status started = StartAgent({0, 1}, {}, R"(version: v1
sharing:
  timeSlicing:
    renameByDefault: true
    resources:
    - name: nvidia.com/gpu
      replicas: 3
)");
  ASSERT_TRUE(started.ok()) << started.ToString();
  ASSERT_TRUE(kubelet_->WaitForRegistrations(2, std::chrono::seconds(5)));
  std::map<std::string, std::string> registered = Registered();
  EXPECT_EQ(registered.count("nvidia.com/gpu"), 0u) << "every GPU is shared, under the new name";
  EXPECT_EQ(registered["nvidia.com/gpu.shared"], "gpufrac-nvidia-gpu.shared.sock");
  std::map<std::string, std::string> devices = DeviceList("nvidia.com/gpu.shared");
  EXPECT_EQ(devices.size(), 6u);
  for (const std::string& uuid : {gpu0, gpu1}) {
    for (int r = 0; r < 3; ++r) EXPECT_EQ(devices.count(uuid + "::" + std::to_string(r)), 1u);
  }

  // Replicas of two GPUs, as NVIDIA's plugin allows: each GPU held to its own count.
  v1beta1::ContainerAllocateResponse c;
  grpc::Status s =
      Allocate("nvidia.com/gpu.shared", {gpu1 + "::2", gpu0 + "::1", gpu1 + "::0"}, &c);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(c.envs().at("CUDA_VISIBLE_DEVICES"), gpu1 + "," + gpu0);
  limiter::LimitConfig limits = Limits(c);
  ASSERT_EQ(limits.gpu_count, 2);
  EXPECT_STREQ(limits.gpus[0].uuid, gpu1.c_str());
  EXPECT_EQ(limits.gpus[0].limit_bytes, memory * 2 / 3);
  EXPECT_EQ(limits.gpus[0].compute_milli, 666u);
  EXPECT_STREQ(limits.gpus[1].uuid, gpu0.c_str());
  EXPECT_EQ(limits.gpus[1].limit_bytes, memory / 3);
  EXPECT_EQ(limits.gpus[1].compute_milli, 333u);
  std::set<std::string> mounted = Mounted(c);
  EXPECT_EQ(mounted.count("/etc/gpufrac/compute." + gpu0), 1u);
  EXPECT_EQ(mounted.count("/etc/gpufrac/compute." + gpu1), 1u);

  // All of a GPU's replicas are the whole GPU: nobody shares it, no limiter.
  s = Allocate("nvidia.com/gpu.shared", {gpu0 + "::0", gpu0 + "::2"}, &c);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_FALSE(LimitFile(c).empty());
  s = Allocate("nvidia.com/gpu.shared", {gpu0 + "::0", gpu0 + "::1", gpu0 + "::2"}, &c);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(c.mounts_size(), 0);
  EXPECT_EQ(c.envs().at("CUDA_VISIBLE_DEVICES"), gpu0);
}

TEST_F(NvidiaResourcesTest, FailRequestsGreaterThanOneRefusesTwoReplicas) {
  const std::string gpu1 = Machine().inventory.gpus.at(1).uuid;
  Status started = StartAgent({1}, {}, R"(version: v1
sharing:
  timeSlicing:
    failRequestsGreaterThanOne: true
    resources:
    - name: nvidia.com/gpu
      replicas: 4
)");
  ASSERT_TRUE(started.ok()) << started.ToString();
  ASSERT_TRUE(kubelet_->WaitForRegistrations(2, std::chrono::seconds(5)));
  v1beta1::ContainerAllocateResponse c;
  grpc::Status s = Allocate("nvidia.com/gpu", {gpu1 + "::0", gpu1 + "::1"}, &c);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(),
              HasSubstr("nvidia.com/gpu [" + gpu1 + "::0," + gpu1 +
                        "::1]: a container may take one replica of a shared GPU at most (the "
                        "sharing configuration sets failRequestsGreaterThanOne), and this one "
                        "asks for 2; ask for nvidia.com/gpu: 1"));
  s = Allocate("nvidia.com/gpu", {gpu1 + "::1"}, &c);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(Limits(c).gpus[0].compute_milli, 250u);
}

TEST_F(NvidiaResourcesTest, MpsReplicasGetTheirMemoryAndThreadPercentage) {
  const std::string gpu1 = Machine().inventory.gpus.at(1).uuid;
  const uint64_t memory = Machine().inventory.gpus.at(1).memory_bytes;
  mps_shm_dir_ = host_dir_.path() + "/mps-shm";
  std::filesystem::create_directories(mps_shm_dir_);
  Status started = StartAgent({1}, {}, R"(version: v1
sharing:
  mps:
    resources:
    - name: nvidia.com/gpu
      replicas: 3
)");
  ASSERT_TRUE(started.ok()) << started.ToString();
  ASSERT_TRUE(kubelet_->WaitForRegistrations(2, std::chrono::seconds(5)));
  EXPECT_EQ(DeviceList("nvidia.com/gpu").size(), 3u);
  v1beta1::ContainerAllocateResponse c;
  grpc::Status s = Allocate("nvidia.com/gpu", {gpu1 + "::1"}, &c);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(c.envs().at("CUDA_VISIBLE_DEVICES"), gpu1);
  EXPECT_EQ(c.envs().at("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "34");  // 100/3, rounded up.
  // A client of the MPS daemon the agent runs for GPU 1: its pipe directory, read-only.
  EXPECT_EQ(c.envs().at("CUDA_MPS_PIPE_DIRECTORY"), "/mps/pipe");
  EXPECT_EQ(c.envs().at("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"),
            "0=" + std::to_string((memory / 3) >> 20) + "M");
  bool pipe_mounted = false, shm_mounted = false;
  for (const auto& m : c.mounts()) {
    if (m.container_path() == "/dev/shm") {
      // --mps-shm-dir: the daemons' /dev/shm, shared with their clients as NVIDIA's plugin does.
      shm_mounted = true;
      EXPECT_EQ(m.host_path(), mps_shm_dir_);
      EXPECT_FALSE(m.read_only());
    }
    if (m.container_path() != "/mps/pipe") continue;
    pipe_mounted = true;
    EXPECT_EQ(m.host_path(), host_dir_.path() + "/mps/1/pipe");
    EXPECT_TRUE(m.read_only());
  }
  EXPECT_TRUE(pipe_mounted);
  EXPECT_TRUE(shm_mounted);
  ASSERT_NE(agent_->mps(), nullptr);
  std::map<int, pid_t> running = agent_->mps()->Running();
  ASSERT_EQ(running.size(), 1u) << "one daemon, GPU 1's";
  ASSERT_EQ(running.count(1), 1u);
  auto percentage = agent_->mps()->Command(1, "get_default_active_thread_percentage");
  ASSERT_TRUE(percentage.ok()) << percentage.status().ToString();
  EXPECT_EQ(*percentage, "34.0");
  // A CUDA process with the container's environment (the pipe directory where the runtime
  // mounts it from) is a client of that daemon, on 34% of the H100's 132 SMs, rounded down.
  std::map<std::string, std::string> env;
  for (const auto& [name, value] : c.envs()) env[name] = value;
  env["CUDA_MPS_PIPE_DIRECTORY"] = host_dir_.path() + "/mps/1/pipe";
  env["LD_LIBRARY_PATH"] = GPUFRAC_SIMGPU_DIR;
  env["SIMGPU_NAMESPACE"] = SimNamespace();
  env["SIMGPU_CONFIG"] = kSim;
  gpufrac::testing::RunResult probe =
      gpufrac::testing::RunCommand({gpufrac::testing::BuildPath("bin/mps_probe"), "info"}, env);
  EXPECT_EQ(probe.status, 0) << probe.out << probe.err;
  EXPECT_EQ(probe.Get("sms"), "44") << "not an MPS client at 34%: " << probe.out << probe.err;
  limiter::LimitConfig limits = Limits(c);
  ASSERT_EQ(limits.gpu_count, 1);
  EXPECT_EQ(limits.gpus[0].limit_bytes, memory / 3);
  // MPS divides the GPU's SMs, not its time: no compute pair, no arbiter.
  EXPECT_FALSE(limits.gpus[0].arbitrated);
  EXPECT_EQ(Mounted(c).count("/etc/gpufrac/compute." + gpu1), 0u);
  // As in NVIDIA's plugin, an MPS container takes one replica unless the file says otherwise.
  s = Allocate("nvidia.com/gpu", {gpu1 + "::0", gpu1 + "::2"}, &c);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  // Gone when the agent stops, serving nobody.
  agent_->Stop();
  EXPECT_TRUE(agent_->mps()->Running().empty());
  const pid_t daemon = running[1];
  for (int i = 0; i < 250 && kill(daemon, 0) == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_NE(kill(daemon, 0), 0) << "the MPS daemon still runs";
}

TEST_F(NvidiaResourcesTest, RefusesMpsGpusThatCannotBeSo) {
  struct Case {
    std::vector<int> mps, whole, nvidia;
    std::string shm_dir, says;
  };
  for (const Case& c : std::vector<Case>{
           {{7}, {}, {}, "", "--mps-gpus: no GPU 7 on this node"},
           {{0}, {0}, {}, "", "GPU 0 is in both --whole-gpus and --mps-gpus"},
           {{2}, {}, {}, "", "--mps-gpus: GPU 2 is in MIG mode"},
           {{1}, {}, {1}, "", "--nvidia-gpus: GPU 1 is also in --mps-gpus"},
           {{1}, {}, {}, "/nonexistent", "--mps-shm-dir /nonexistent: no such directory"},
       }) {
    mps_gpus_ = c.mps;
    whole_gpus_ = c.whole;
    mps_shm_dir_ = c.shm_dir;
    Status s = StartAgent(c.nvidia, {});
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.says << ": " << s.ToString();
    EXPECT_THAT(s.message(), HasSubstr(c.says));
    EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message();
    EXPECT_EQ(agent_->mps(), nullptr) << c.says << ": no daemon for a refused configuration";
    agent_->Stop();
  }
  EXPECT_TRUE(kubelet_->registrations().empty());
}

TEST_F(NvidiaResourcesTest, TheComputePolicyGivesAReplicasComputeLimit) {
  const std::string gpu1 = Machine().inventory.gpus.at(1).uuid;
  const std::string config =
      "sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 4}]}}\n";
  struct Case {
    std::string policy;
    uint32_t compute, limit;
  };
  size_t registrations = 0;
  for (const Case& k : std::vector<Case>{{"strict", 250, 250}, {"off", 0, 0}}) {
    compute_policy_ = k.policy;
    Status started = StartAgent({1}, {}, config);
    ASSERT_TRUE(started.ok()) << started.ToString();
    registrations += 2;
    ASSERT_TRUE(kubelet_->WaitForRegistrations(registrations, std::chrono::seconds(5)));
    v1beta1::ContainerAllocateResponse c;
    grpc::Status s = Allocate("nvidia.com/gpu", {gpu1 + "::3"}, &c);
    ASSERT_TRUE(s.ok()) << s.error_message();
    limiter::LimitConfig limits = Limits(c);
    EXPECT_EQ(limits.gpus[0].compute_milli, k.compute) << k.policy;
    EXPECT_EQ(limits.gpus[0].compute_limit_milli, k.limit) << k.policy;
    agent_->Stop();
    agent_.reset();
  }
}

TEST_F(NvidiaResourcesTest, RefusesASharingConfigurationThatDoesNotFit) {
  struct Case {
    std::vector<int> nvidia;
    std::string file, says;
  };
  const std::string head = "version: v1\nsharing:\n  timeSlicing:\n    resources:\n";
  for (const Case& c : std::vector<Case>{
           {{1},
            head + "    - name: nvidia.com/gpu\n      replicas: 0\n",
            "nvidia-config.yaml:6: sharing.timeSlicing.resources[0].replicas: must be a whole "
            "number from 1 to 1000"},
           {{1},
            head + "    - name: nvidia.com/gpu\n      replicas: 2\n      devices: [0]\n",
            "nvidia-config.yaml:5: sharing.timeSlicing.resources[0].devices: GPU 0 is not served "
            "as nvidia.com/gpu; add 0 to --nvidia-gpus (now 1)"},
           {{},
            head + "    - name: nvidia.com/gpu\n      replicas: 2\n",
            "list the GPUs to share in --nvidia-gpus"},
       }) {
    Status s = StartAgent(c.nvidia, {}, c.file);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.says;
    EXPECT_THAT(s.message(), HasSubstr(c.says));
    EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message();
    if (agent_) agent_->Stop();
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

TEST(NvidiaNamesTest, ReplicasHaveNvidiasIdsAndTheirGpusHealth) {
  EXPECT_EQ(NvidiaReplicaId("GPU-a", 3), "GPU-a::3");
  NodeInventory all;
  for (int i = 0; i < 3; ++i) {
    GpuInfo g;
    g.index = i;
    g.uuid = "GPU-" + std::to_string(i);
    g.healthy = i != 2;
    all.gpus.push_back(g);
  }
  NvidiaSharing sharing;
  sharing.gpus[1] = {"nvidia.com/gpu", 2};
  sharing.gpus[2] = {"nvidia.com/gpu.shared", 2};
  auto resources = NvidiaResources(all, {.whole = {0, 1, 2}, .static_mig = {}}, &sharing);
  EXPECT_EQ(resources["nvidia.com/gpu"],
            (std::vector<NvidiaDevice>{
                {"GPU-0", 0, true, 0}, {"GPU-1::0", 1, true, 2}, {"GPU-1::1", 1, true, 2}}));
  EXPECT_EQ(resources["nvidia.com/gpu.shared"],
            (std::vector<NvidiaDevice>{{"GPU-2::0", 2, false, 2}, {"GPU-2::1", 2, false, 2}}));
  EXPECT_EQ(resources.size(), 2u);
}

}  // namespace
}  // namespace gpufrac::k8s
