// The node's nvidia.com/mig.config label, from label to advertised resources to pods placed, on
// simulated GPUs against the fake API server and kubelet: NVIDIA's MIG manager walkthrough (label
// an 8 x H100 node all-1g.10gb, see nvidia.com/mig-1g.10gb: 56, scale a deployment of one-slice
// pods to 100, 56 run), the state label and events, the devices withdrawn from the kubelet a
// resync before the change (no pod can be admitted to an instance about to be replaced), waiting
// for pods that hold instances, the single strategy, an operator's ConfigMap, and configurations
// that fail leaving the GPUs as they were.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "common/paths.h"
#include "harness.h"
#include "k8s/agent_service.h"
#include "k8s/api_client.h"
#include "k8s/fake_apiserver.h"
#include "k8s/fake_kubelet.h"
#include "k8s/fake_node.h"
#include "k8s/mig_config_label.h"
#include "k8s/object_fields.h"
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

constexpr char kNode[] = "h100-node";
constexpr char kSim[] = "8xH100-80GB:mig";
constexpr char kSlice[] = "nvidia.com/mig-1g.10gb";

class MigConfigLabelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("GPUFRAC_SIMGPU_DIR", GPUFRAC_SIMGPU_DIR, 1);
    StatusOr<testing::FakeNode> node =
        testing::StartFakeNode(testing::BareNode(kNode), kubelet_dir_.path());
    ASSERT_TRUE(node.ok()) << node.status().ToString();
    server_ = std::move(node->server);
    client_ = std::move(node->client);
    kubelet_ = std::move(node->kubelet);
    std::filesystem::create_directories(host_dir_.path() + "/dev");
  }

  void TearDown() override {
    if (agent_) agent_->Stop();
    simgpu::RemoveSharedMachine("k8s-" + StateDirTag(host_dir_.path()));
    gpufrac::testing::RemoveRecordedBudgetDir(host_dir_.path() + "/arbiters");
  }

  // The agent with every GPU in static MIG; `configmap`: an operator's mig-parted file.
  Status StartAgent(const std::string& strategy = "mixed", const std::string& configmap = "",
                    std::vector<int> static_mig = {0, 1, 2, 3, 4, 5, 6, 7}) {
    AgentServiceOptions options;
    options.agent.node = kNode;
    options.agent.host_dir = host_dir_.path();
    options.agent.dev_dir = host_dir_.path() + "/dev";
    options.kubelet_dir = kubelet_dir_.path();
    options.sim = kSim;
    options.limiter_path = std::string(GPUFRAC_BUILD_DIR) + "/lib/libgpufrac.so";
    options.static_mig_gpus = std::move(static_mig);
    options.mig_strategy = strategy;
    if (!configmap.empty()) {
      options.mig_parted_config = host_dir_.path() + "/config.yaml";
      std::ofstream(options.mig_parted_config) << configmap;
    }
    auto agent = AgentService::Create(client_.get(), options);
    if (!agent.ok()) return agent.status();
    agent_ = std::move(*agent);
    return agent_->Start();
  }

  // kubectl label node --overwrite; a null `value` removes the label.
  void Label(const std::string& key, const json& value) {
    auto done = client_->Patch(std::string("/api/v1/nodes/") + kNode,
                               {{"metadata", {{"labels", {{key, value}}}}}});
    ASSERT_TRUE(done.ok()) << done.status().ToString();
  }

  // Labels the node with configuration `name` and resyncs twice: the first resync withdraws the
  // devices of the GPUs it changes, the second applies it.
  void Configure(const std::string& name) {
    Label("nvidia.com/mig.config", name);
    ASSERT_TRUE(agent_->Resync().ok());
    ASSERT_TRUE(agent_->Resync().ok());
  }

  json Labels() { return (*server_->Get("nodes", "", kNode))["metadata"]["labels"]; }
  std::string State() { return Labels().value(std::string(kLabelMigConfigState), ""); }

  // Every value the agent gave nvidia.com/mig.config.state, in order.
  std::vector<std::string> States() {
    std::vector<std::string> out;
    for (const auto& r : server_->requests("PATCH", std::string("/api/v1/nodes/") + kNode)) {
      json body = json::parse(r.body);
      const json* labels = &body["metadata"]["labels"];
      if (labels->contains(std::string(kLabelMigConfigState))) {
        out.push_back((*labels)[std::string(kLabelMigConfigState)]);
      }
    }
    return out;
  }

  // The node's events with `reason`: their messages.
  std::vector<std::string> Events(std::string_view reason) {
    std::vector<std::string> out;
    for (const auto& r : server_->requests("POST", "/api/v1/namespaces/default/events")) {
      json event = json::parse(r.body);
      if (event["reason"] == std::string(reason) && event["involvedObject"]["kind"] == "Node" &&
          event["involvedObject"]["name"] == kNode) {
        out.push_back(event["message"]);
      }
    }
    return out;
  }

  std::map<std::string, std::string> Registered() {
    std::map<std::string, std::string> out;
    for (const auto& r : kubelet_->registrations()) out[r.resource_name()] = r.endpoint();
    return out;
  }

  // The devices of `resource` as the kubelet's ListAndWatch now lists them (its latest list):
  // id -> health ("Healthy" or "Unhealthy").
  std::map<std::string, std::string> Health(const std::string& resource) {
    auto registered = Registered();
    if (registered.count(resource) == 0) return {};
    KubeletClient kubelet(kubelet_dir_.path(), registered.at(resource));
    kubelet.StartListAndWatch();
    std::map<std::string, std::string> out;
    auto list = kubelet.NextDeviceList(std::chrono::seconds(5));
    EXPECT_TRUE(list.has_value()) << resource;
    if (list) {
      for (const auto& d : list->devices()) out[d.id()] = d.health();
    }
    return out;
  }

  // Their ids.
  std::vector<std::string> Devices(const std::string& resource) {
    std::vector<std::string> out;
    for (const auto& [id, health] : Health(resource)) out.push_back(id);
    return out;
  }

  // How many devices of `resource` the kubelet's list has with `health`.
  size_t Count(const std::string& resource, const std::string& health) {
    size_t n = 0;
    for (const auto& [id, h] : Health(resource)) n += h == health;
    return n;
  }

  // A pod of a deployment asking for one `resource`, unbound; or bound to the node and running.
  void Pod(const std::string& name, const std::string& resource, bool running = false) {
    json pod = {{"apiVersion", "v1"},
                {"kind", "Pod"},
                {"metadata", {{"name", name}, {"namespace", "default"}}},
                {"spec",
                 {{"containers",
                   {{{"name", "cuda"},
                     {"image", "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"},
                     {"resources", {{"limits", {{resource, 1}}}}}}}}}},
                {"status", {{"phase", "Pending"}}}};
    if (running) {
      pod["spec"]["nodeName"] = kNode;
      pod["status"]["phase"] = "Running";
    }
    server_->Put(pod);
  }

  // The GPUs' instances as the driver has them: "<profile> <MIG UUID>", in GPU order.
  std::vector<std::string> Instances() {
    if (!machine_) {
      std::string warning;
      auto gpus = machine::OpenNodeGpus({.sim = kSim,
                                         .sim_namespace = "k8s-" + StateDirTag(host_dir_.path()),
                                         .whole_gpus = {},
                                         .mps_gpus = {}},
                                        &warning);
      EXPECT_TRUE(gpus.ok()) << gpus.status().ToString();
      if (!gpus.ok()) return {};
      machine_ = std::move(*gpus);
    }
    std::vector<std::string> out;
    for (int g = 0; g < 8; ++g) {
      auto list = machine_->mig_backend->List(g);
      EXPECT_TRUE(list.ok()) << list.status().ToString();
      if (!list.ok()) continue;
      const gpu::MigModel* model = machine_->mig_models.at(g);
      for (const auto& i : *list) {
        out.push_back(gpu::MigProfileName(*model, model->profiles[i.profile]) + " " + i.uuid);
      }
    }
    return out;
  }

  TempDir kubelet_dir_;
  TempDir host_dir_;
  std::unique_ptr<FakeApiServer> server_;
  std::unique_ptr<ApiClient> client_;
  std::unique_ptr<FakeKubelet> kubelet_;
  std::unique_ptr<machine::NodeGpus> machine_;
  std::unique_ptr<AgentService> agent_;
};

TEST_F(MigConfigLabelTest, LabelToResourcesToPodsPlacedAsInNvidiasWalkthrough) {
  Status started = StartAgent();
  ASSERT_TRUE(started.ok()) << started.ToString();
  EXPECT_EQ(Registered().count(kSlice), 0u) << "no instances yet";

  // kubectl label node h100-node nvidia.com/mig.config=all-1g.10gb: the first resync checks it
  // and withdraws the GPUs' devices (they have none yet), the next applies it.
  Label("nvidia.com/mig.config", "all-1g.10gb");
  ASSERT_TRUE(agent_->Resync().ok());
  EXPECT_EQ(States(), (std::vector<std::string>{"pending"}));
  EXPECT_TRUE(Instances().empty());
  ASSERT_TRUE(agent_->Resync().ok());
  EXPECT_EQ(States(), (std::vector<std::string>{"pending", "success"}));
  ASSERT_EQ(Events(kReasonMigConfigApplied).size(), 1u);
  EXPECT_THAT(Events(kReasonMigConfigApplied)[0], HasSubstr("all-1g.10gb applied"));

  // The kubelet hears of 56 one-slice instances, each its own MIG UUID.
  ASSERT_TRUE(kubelet_->WaitForRegistrations(2, std::chrono::seconds(5)));
  std::vector<std::string> devices = Devices(kSlice);
  std::set<std::string> distinct(devices.begin(), devices.end());
  EXPECT_EQ(devices.size(), 56u);
  EXPECT_EQ(distinct.size(), 56u);
  for (const std::string& id : devices) EXPECT_EQ(id.rfind("MIG-", 0), 0u) << id;
  EXPECT_EQ(Count(kSlice, "Healthy"), 56u);

  // GPU feature discovery's labels.
  json labels = Labels();
  EXPECT_EQ(labels["nvidia.com/mig.strategy"], "mixed");
  EXPECT_EQ(labels["nvidia.com/mig-1g.10gb.count"], "56");
  EXPECT_EQ(labels["nvidia.com/mig-1g.10gb.memory"], "9984");
  EXPECT_EQ(labels["nvidia.com/mig-1g.10gb.slices.gi"], "1");
  EXPECT_EQ(labels["nvidia.com/mig-1g.10gb.slices.ci"], "1");
  EXPECT_FALSE(labels.contains("nvidia.com/mig-7g.80gb.count"));
  EXPECT_EQ(labels["nvidia.com/mig.config.state"], "success");

  // A deployment of one-slice pods scaled to 100. A stand-in for kube-scheduler binds a pod
  // while the node's allocatable (the devices the kubelet was given) lasts; the kubelet then
  // allocates each bound pod's container a device not yet in use.
  for (int i = 0; i < 100; ++i) Pod("slices-" + std::to_string(i), kSlice);
  std::set<std::string> free(devices.begin(), devices.end());
  std::set<std::string> given;
  KubeletClient kubelet(kubelet_dir_.path(), Registered().at(kSlice));
  int bound = 0;
  for (int i = 0; i < 100; ++i) {
    if (free.empty()) break;  // Insufficient nvidia.com/mig-1g.10gb: the pod stays Pending.
    const std::string name = "slices-" + std::to_string(i);
    auto binding =
        client_->Create("/api/v1/namespaces/default/pods/" + name + "/binding",
                        {{"apiVersion", "v1"},
                         {"kind", "Binding"},
                         {"metadata", {{"name", name}}},
                         {"target", {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", kNode}}}});
    ASSERT_TRUE(binding.ok()) << binding.status().ToString();
    ++bound;
    const std::string device = *free.begin();
    free.erase(free.begin());
    v1beta1::AllocateResponse response;
    grpc::Status s = kubelet.Allocate({{device}}, &response);
    ASSERT_TRUE(s.ok()) << s.error_message();
    const std::string visible = response.container_responses(0).envs().at("NVIDIA_VISIBLE_DEVICES");
    EXPECT_EQ(visible, device);
    given.insert(visible);
  }
  EXPECT_EQ(bound, 56);
  EXPECT_EQ(given.size(), 56u) << "each running pod has its own MIG instance";
  int pending = 0;
  for (int i = 0; i < 100; ++i) {
    pending += PodNodeName(*server_->Get("pods", "default", "slices-" + std::to_string(i))).empty();
  }
  EXPECT_EQ(pending, 44);

  // The same label again changes nothing.
  ASSERT_TRUE(agent_->Resync().ok());
  EXPECT_EQ(States().size(), 2u);
  EXPECT_EQ(Devices(kSlice), devices);
}

// Issue 29: the labels of profiles no longer served stayed through agent restarts. An agent that
// no longer has static MIG GPUs (and one that restarts with no memory of what it wrote) removes
// the labels of its families it does not publish, those an earlier agent left included; the
// operator's nvidia.com/mig.config and labels of other families stay.
TEST_F(MigConfigLabelTest, LabelsNoLongerTrueGoAfterARestartWithoutStaticMigGpus) {
  ASSERT_TRUE(StartAgent().ok());
  Configure("all-1g.10gb");
  ASSERT_EQ(Labels()["nvidia.com/mig-1g.10gb.count"], "56");
  agent_->Stop();
  agent_.reset();
  // What an earlier agent, from before the record of the labels it wrote, left: a profile
  // served then, and the single strategy's slices.
  auto done = client_->Patch(
      std::string("/api/v1/nodes/") + kNode,
      {{"metadata", {{"annotations", {{std::string(kAnnotationAgentLabels), nullptr}}}}}});
  ASSERT_TRUE(done.ok()) << done.status();
  Label("nvidia.com/mig-2g.20gb.count", "3");
  Label("nvidia.com/mig-2g.20gb.memory", "19968");
  Label("nvidia.com/gpu.slices.gi", "2");
  Label("team.example.com/mig-owner", "ml");

  // Restarted without static MIG GPUs: gpufrac lays the MIG GPUs out itself now.
  ASSERT_TRUE(StartAgent("mixed", "", {}).ok());
  json labels = Labels();
  for (const char* gone :
       {"nvidia.com/mig-1g.10gb.count", "nvidia.com/mig-1g.10gb.memory",
        "nvidia.com/mig-1g.10gb.slices.gi", "nvidia.com/mig-1g.10gb.slices.ci",
        "nvidia.com/mig-2g.20gb.count", "nvidia.com/mig-2g.20gb.memory", "nvidia.com/mig.strategy",
        "nvidia.com/gpu.slices.gi", "nvidia.com/mig.config.state"}) {
    EXPECT_FALSE(labels.contains(gone)) << gone << " stayed: " << labels.dump();
  }
  EXPECT_EQ(labels["nvidia.com/mig.config"], "all-1g.10gb") << "the operator's label stays";
  EXPECT_EQ(labels["team.example.com/mig-owner"], "ml");
  EXPECT_EQ(labels["gpufrac.io/agent"], "true");
  EXPECT_EQ(labels["nvidia.com/gpu.count"], "8");

  // With static MIG GPUs again, a restart keeps what is still true.
  agent_->Stop();
  agent_.reset();
  ASSERT_TRUE(StartAgent().ok());
  Configure("all-1g.10gb");
  agent_->Stop();
  agent_.reset();
  ASSERT_TRUE(StartAgent().ok());
  labels = Labels();
  EXPECT_EQ(labels["nvidia.com/mig-1g.10gb.count"], "56");
  EXPECT_EQ(labels["nvidia.com/mig.strategy"], "mixed");
  EXPECT_EQ(labels["nvidia.com/mig.config.state"], "success");
}

// Issue 29 (L3): GPU feature discovery writes labels of the same families, and an operator may
// set nvidia.com/mig.strategy by hand; the agent removes only the labels it wrote itself.
TEST_F(MigConfigLabelTest, OnlyLabelsTheAgentWroteGoNotThoseOfFeatureDiscoveryOrTheOperator) {
  ASSERT_TRUE(StartAgent().ok());
  Configure("all-1g.10gb");
  ASSERT_EQ(Labels()["nvidia.com/mig-1g.10gb.count"], "56");
  agent_->Stop();
  agent_.reset();
  // GFD's labels for a profile the agent did not publish, and the strategy's slices.
  Label("nvidia.com/mig-2g.20gb.count", "3");
  Label("nvidia.com/gpu.slices.ci", "2");
  ASSERT_TRUE(StartAgent("mixed", "", {}).ok());
  json labels = Labels();
  for (const char* gone : {"nvidia.com/mig-1g.10gb.count", "nvidia.com/mig-1g.10gb.memory",
                           "nvidia.com/mig.strategy"}) {
    EXPECT_FALSE(labels.contains(gone)) << gone << " stayed: " << labels.dump();
  }
  EXPECT_EQ(labels["nvidia.com/mig-2g.20gb.count"], "3") << labels.dump();
  EXPECT_EQ(labels["nvidia.com/gpu.slices.ci"], "2");
  const std::string record = (*server_->Get(
      "nodes", "", kNode))["metadata"]["annotations"][std::string(kAnnotationAgentLabels)];
  EXPECT_THAT(record, HasSubstr("gpufrac.io/agent"));
  EXPECT_THAT(record, ::testing::Not(HasSubstr("nvidia.com/mig-")));
  EXPECT_THAT(record, ::testing::Not(HasSubstr("nvidia.com/mig.strategy")));

  // The operator's strategy, set by hand where the agent no longer writes one, stays too.
  agent_->Stop();
  agent_.reset();
  Label("nvidia.com/mig.strategy", "single");
  ASSERT_TRUE(StartAgent("mixed", "", {}).ok());
  EXPECT_EQ(Labels()["nvidia.com/mig.strategy"], "single");
}

TEST_F(MigConfigLabelTest, AnUnknownNameFailsWithAnEventAndChangesNothing) {
  ASSERT_TRUE(StartAgent().ok());
  Configure("all-1g.10gb");
  const std::vector<std::string> before = Instances();
  ASSERT_EQ(before.size(), 56u);

  Label("nvidia.com/mig.config", "all-9g.1tb");
  ASSERT_TRUE(agent_->Resync().ok());
  EXPECT_EQ(States(), (std::vector<std::string>{"pending", "success", "pending", "failed"}));
  EXPECT_EQ(State(), "failed");
  std::vector<std::string> failed = Events(kReasonMigConfigFailed);
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_THAT(failed[0], HasSubstr("no configuration all-9g.1tb"));
  EXPECT_THAT(failed[0], HasSubstr("all-balanced")) << "it lists the names it knows";
  // In Kubernetes' terms (issue 29): the ConfigMap, not the agent's flag.
  EXPECT_THAT(failed[0], HasSubstr("no mig-parted ConfigMap (create gpufrac-mig-parted"));
  EXPECT_THAT(failed[0], ::testing::Not(HasSubstr("--mig-parted-config")));
  EXPECT_EQ(failed[0].find('\n'), std::string::npos);
  EXPECT_EQ(Instances(), before);
  EXPECT_EQ(Count(kSlice, "Healthy"), 56u) << "a configuration that fails its checks withdraws "
                                              "nothing";

  // A failure is not retried at every resync; only a new label is looked at.
  ASSERT_TRUE(agent_->Resync().ok());
  EXPECT_EQ(States().size(), 4u);
  EXPECT_EQ(Events(kReasonMigConfigFailed).size(), 1u);
}

TEST_F(MigConfigLabelTest, WaitsWhilePodsHoldInstancesSaysSoOnceThenApplies) {
  ASSERT_TRUE(StartAgent().ok());
  Configure("all-1g.10gb");
  const std::vector<std::string> before = Instances();
  Pod("trainer", kSlice, /*running=*/true);

  Label("nvidia.com/mig.config", "all-balanced");
  ASSERT_TRUE(agent_->Resync().ok());
  EXPECT_EQ(State(), "pending");
  std::vector<std::string> waiting = Events(kReasonMigConfigWaiting);
  ASSERT_EQ(waiting.size(), 1u);
  EXPECT_THAT(waiting[0], HasSubstr("all-balanced waits"));
  EXPECT_THAT(waiting[0], HasSubstr("default/trainer"));
  EXPECT_EQ(Instances(), before) << "never touched while a pod holds an instance";
  // Withdrawn while it waits: the trainer keeps its instance, no new pod gets one.
  EXPECT_EQ(Count(kSlice, "Unhealthy"), 56u);
  ASSERT_TRUE(agent_->Resync().ok());
  EXPECT_EQ(State(), "pending");
  EXPECT_EQ(Events(kReasonMigConfigWaiting).size(), 1u) << "said once per change";
  EXPECT_EQ(Instances(), before);

  // The operator changes their mind: back to the layout in place, which stays, its devices
  // healthy again.
  Label("nvidia.com/mig.config", "all-1g.10gb");
  ASSERT_TRUE(agent_->Resync().ok());
  EXPECT_EQ(State(), "success");
  EXPECT_EQ(Instances(), before);
  EXPECT_EQ(Count(kSlice, "Healthy"), 56u);
  // And forth: a new change, said again.
  Label("nvidia.com/mig.config", "all-balanced");
  ASSERT_TRUE(agent_->Resync().ok());
  EXPECT_EQ(State(), "pending");
  EXPECT_EQ(Events(kReasonMigConfigWaiting).size(), 2u);

  // The pod ends: the next resync applies.
  json pod = *server_->Get("pods", "default", "trainer");
  pod["status"]["phase"] = "Succeeded";
  server_->Put(pod);
  ASSERT_TRUE(agent_->Resync().ok());
  EXPECT_EQ(State(), "success");
  json labels = Labels();
  EXPECT_EQ(labels["nvidia.com/mig-1g.10gb.count"], "16");
  EXPECT_EQ(labels["nvidia.com/mig-2g.20gb.count"], "8");
  EXPECT_EQ(labels["nvidia.com/mig-3g.40gb.count"], "8");
  EXPECT_EQ(labels["nvidia.com/mig-3g.40gb.memory"], "40448");
  EXPECT_EQ(Count(kSlice, "Healthy"), 16u) << "the new instances' devices, healthy";
  EXPECT_EQ(Count("nvidia.com/mig-3g.40gb", "Healthy"), 8u);
  EXPECT_EQ(Devices(kSlice).size(), 16u);
}

TEST_F(MigConfigLabelTest, WithdrawsTheDevicesAResyncBeforeTheChangeSoNoPodIsAdmittedToThem) {
  ASSERT_TRUE(StartAgent().ok());
  Configure("all-1g.10gb");
  ASSERT_EQ(State(), "success");
  const std::vector<std::string> before = Instances();
  ASSERT_EQ(before.size(), 56u);
  ASSERT_EQ(Count(kSlice, "Healthy"), 56u);

  // Nothing holds the GPUs, yet the first resync only withdraws their devices: still listed (the
  // kubelet must see them go unhealthy, not vanish), but unhealthy, so it admits no new pod.
  Label("nvidia.com/mig.config", "all-balanced");
  ASSERT_TRUE(agent_->Resync().ok());
  EXPECT_EQ(State(), "pending");
  EXPECT_EQ(Instances(), before) << "not changed at the resync that withdrew the devices";
  EXPECT_EQ(Count(kSlice, "Unhealthy"), 56u);
  EXPECT_EQ(Count(kSlice, "Healthy"), 0u);
  EXPECT_TRUE(Events(kReasonMigConfigWaiting).empty()) << "nothing to wait for";

  // The race: a pod the kubelet admitted just before it took the withdrawal, bound to the node
  // and holding an instance. The next resync sees it in its fresh list of pods and waits.
  Pod("late", kSlice, /*running=*/true);
  ASSERT_TRUE(agent_->Resync().ok());
  EXPECT_EQ(State(), "pending");
  EXPECT_EQ(Instances(), before) << "never touched while a pod holds an instance";
  std::vector<std::string> waiting = Events(kReasonMigConfigWaiting);
  ASSERT_EQ(waiting.size(), 1u);
  EXPECT_THAT(waiting[0], HasSubstr("default/late"));
  EXPECT_EQ(Count(kSlice, "Unhealthy"), 56u) << "still withdrawn while it waits";

  // The pod ends: the next resync applies, and the new instances' devices are healthy.
  json pod = *server_->Get("pods", "default", "late");
  pod["status"]["phase"] = "Succeeded";
  server_->Put(pod);
  ASSERT_TRUE(agent_->Resync().ok());
  EXPECT_EQ(State(), "success");
  EXPECT_NE(Instances(), before);
  EXPECT_EQ(Instances().size(), 32u);
  EXPECT_EQ(Count(kSlice, "Healthy"), 16u);
  EXPECT_EQ(Count(kSlice, "Unhealthy"), 0u);
  EXPECT_EQ(Count("nvidia.com/mig-2g.20gb", "Healthy"), 8u);
  EXPECT_EQ(Count("nvidia.com/mig-3g.40gb", "Healthy"), 8u);
  EXPECT_EQ(States(), (std::vector<std::string>{"pending", "success", "pending", "success"}));
}

TEST_F(MigConfigLabelTest, AConfigurationInPlaceWithdrawsNothing) {
  ASSERT_TRUE(StartAgent().ok());
  Configure("all-1g.10gb");
  ASSERT_EQ(State(), "success");
  const std::vector<std::string> before = Instances();
  ASSERT_EQ(before.size(), 56u);
  Pod("trainer", kSlice, /*running=*/true);

  // A restarted agent finds the label's layout in place: success at its first resync, and the
  // devices never leave the kubelet, not even for a resync, though a pod holds one of them.
  agent_->Stop();
  agent_.reset();
  ASSERT_TRUE(StartAgent().ok());
  ASSERT_TRUE(agent_->Resync().ok());
  EXPECT_EQ(State(), "success");
  EXPECT_EQ(States(), (std::vector<std::string>{"pending", "success", "success"}));
  EXPECT_EQ(Count(kSlice, "Healthy"), 56u);
  EXPECT_EQ(Count(kSlice, "Unhealthy"), 0u);
  EXPECT_TRUE(Events(kReasonMigConfigWaiting).empty());
  EXPECT_EQ(Instances(), before);
  ASSERT_TRUE(agent_->Resync().ok());
  EXPECT_EQ(Count(kSlice, "Healthy"), 56u);
  EXPECT_EQ(Instances(), before);
}

TEST_F(MigConfigLabelTest, AConfigurationGivenUpGivesItsDevicesBack) {
  ASSERT_TRUE(StartAgent().ok());
  Configure("all-1g.10gb");
  const std::vector<std::string> before = Instances();
  ASSERT_EQ(before.size(), 56u);

  // Label removed while a configuration waits: given up, devices and state as they were.
  Label("nvidia.com/mig.config", "all-balanced");
  ASSERT_TRUE(agent_->Resync().ok());
  ASSERT_EQ(Count(kSlice, "Unhealthy"), 56u);
  Label("nvidia.com/mig.config", nullptr);
  ASSERT_TRUE(agent_->Resync().ok());
  EXPECT_EQ(State(), "success");
  EXPECT_EQ(Count(kSlice, "Healthy"), 56u);
  EXPECT_EQ(Instances(), before);
  ASSERT_TRUE(agent_->Resync().ok());
  EXPECT_EQ(Instances(), before);

  // Relabelled: withdrawn again from the start (a resync), not applied at once.
  Label("nvidia.com/mig.config", "all-balanced");
  ASSERT_TRUE(agent_->Resync().ok());
  EXPECT_EQ(State(), "pending");
  EXPECT_EQ(Count(kSlice, "Unhealthy"), 56u);
  EXPECT_EQ(Instances(), before);

  // A name that fails its checks ends the withdrawal.
  Label("nvidia.com/mig.config", "all-9g.1tb");
  ASSERT_TRUE(agent_->Resync().ok());
  EXPECT_EQ(State(), "failed");
  EXPECT_EQ(Count(kSlice, "Healthy"), 56u);
  EXPECT_EQ(Instances(), before);
}

TEST_F(MigConfigLabelTest, WaitsWhileAProcessHasAContextInAnInstance) {
  ASSERT_TRUE(StartAgent().ok());
  Configure("all-3g.40gb");
  const std::vector<std::string> before = Instances();
  ASSERT_EQ(before.size(), 16u);
  // A CUDA program outside Kubernetes (no pod asks for the resource) in GPU 0's first instance.
  const std::string instance = before[0].substr(before[0].find(' ') + 1);
  std::string seen;
  pid_t holder =
      gpufrac::testing::Start({gpufrac::testing::ProbePath(), "hold", "1048576"},
                              {{"LD_LIBRARY_PATH", GPUFRAC_SIMGPU_DIR},
                               {"SIMGPU_NAMESPACE", "k8s-" + StateDirTag(host_dir_.path())},
                               {"SIMGPU_CONFIG", kSim},
                               {"CUDA_VISIBLE_DEVICES", instance}},
                              "hold=", &seen);
  ASSERT_GT(holder, 0);
  ASSERT_NE(seen.find("hold=0"), std::string::npos) << seen;

  Label("nvidia.com/mig.config", "all-1g.10gb");
  ASSERT_TRUE(agent_->Resync().ok());
  EXPECT_EQ(State(), "pending");
  std::vector<std::string> waiting = Events(kReasonMigConfigWaiting);
  ASSERT_EQ(waiting.size(), 1u);
  EXPECT_THAT(waiting[0],
              HasSubstr("GPU 0 has an instance in use by pid " + std::to_string(holder)));
  EXPECT_EQ(Instances(), before);

  kill(holder, SIGKILL);
  waitpid(holder, nullptr, 0);
  ASSERT_TRUE(agent_->Resync().ok());
  EXPECT_EQ(State(), "success");
  EXPECT_EQ(Devices(kSlice).size(), 56u);
}

TEST_F(MigConfigLabelTest, SingleStrategyServesEveryInstanceAsNvidiaGpuAndNeedsOneProfile) {
  ASSERT_TRUE(StartAgent("single").ok());
  Configure("all-1g.10gb");
  EXPECT_EQ(State(), "success");
  ASSERT_TRUE(kubelet_->WaitForRegistrations(2, std::chrono::seconds(5)));
  std::vector<std::string> gpus = Devices("nvidia.com/gpu");
  EXPECT_EQ(gpus.size(), 56u);
  for (const std::string& id : gpus) EXPECT_EQ(id.rfind("MIG-", 0), 0u) << id;
  EXPECT_EQ(Registered().count(kSlice), 0u);
  json labels = Labels();
  EXPECT_EQ(labels["nvidia.com/mig.strategy"], "single");
  EXPECT_THAT(labels["nvidia.com/gpu.product"].get<std::string>(),
              ::testing::EndsWith("-MIG-1g.10gb"));
  EXPECT_THAT(labels["nvidia.com/gpu.product"].get<std::string>(), HasSubstr("H100"));
  EXPECT_EQ(labels["nvidia.com/gpu.count"], "56");
  EXPECT_EQ(labels["nvidia.com/gpu.memory"], "9984");
  EXPECT_FALSE(labels.contains("nvidia.com/mig-1g.10gb.count"));

  // A mixed layout cannot be served so: refused, the GPUs as they were.
  const std::vector<std::string> before = Instances();
  Label("nvidia.com/mig.config", "all-balanced");
  ASSERT_TRUE(agent_->Resync().ok());
  EXPECT_EQ(State(), "failed");
  ASSERT_EQ(Events(kReasonMigConfigFailed).size(), 1u);
  EXPECT_THAT(Events(kReasonMigConfigFailed)[0], HasSubstr("single MIG strategy"));
  EXPECT_EQ(Instances(), before);
  EXPECT_EQ(Count("nvidia.com/gpu", "Healthy"), 56u);

  // A uniform one is served so: withdrawn (every instance is nvidia.com/gpu), then applied.
  Label("nvidia.com/mig.config", "all-2g.20gb");
  ASSERT_TRUE(agent_->Resync().ok());
  EXPECT_EQ(State(), "pending");
  EXPECT_EQ(Count("nvidia.com/gpu", "Unhealthy"), 56u);
  ASSERT_TRUE(agent_->Resync().ok());
  EXPECT_EQ(State(), "success");
  EXPECT_EQ(Count("nvidia.com/gpu", "Healthy"), 24u);
}

TEST_F(MigConfigLabelTest, AnOperatorsConfigMapOverridesAndExtendsTheDefaults) {
  Status bad = StartAgent("mixed", "version: v1\nmig-configs:\n  x: 3\n");
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument) << bad.ToString();
  EXPECT_THAT(bad.message(), HasSubstr("config.yaml:"));
  EXPECT_EQ(bad.message().find('\n'), std::string::npos);

  ASSERT_TRUE(StartAgent("mixed", R"(version: v1
mig-configs:
  all-1g.10gb:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb": 2
  two-3g:
    - devices: all
      mig-enabled: true
      mig-devices:
        "3g.40gb": 2
  too-much:
    - devices: all
      mig-enabled: true
      mig-devices:
        "7g.80gb": 1
        "1g.10gb": 1
)")
                  .ok());
  Configure("all-1g.10gb");
  EXPECT_EQ(State(), "success");
  EXPECT_EQ(Devices(kSlice).size(), 16u) << "the operator's all-1g.10gb, not the default";

  Configure("two-3g");
  EXPECT_EQ(State(), "success");
  json labels = Labels();
  EXPECT_EQ(labels["nvidia.com/mig-3g.40gb.count"], "16");
  EXPECT_FALSE(labels.contains("nvidia.com/mig-1g.10gb.count")) << "gone with the profile";
  EXPECT_FALSE(labels.contains("nvidia.com/mig-1g.10gb.memory"));
  EXPECT_TRUE(Devices(kSlice).empty()) << "the vanished profile is withdrawn from the kubelet";

  // Layouts that cannot be: refused before anything changes.
  const std::vector<std::string> before = Instances();
  ASSERT_EQ(before.size(), 16u);
  struct Case {
    std::string name, says;
  };
  for (const Case& c :
       std::vector<Case>{{"too-much", "H100-80GB"},
                         {"all-disabled",
                          "GPU 0 (H100-80GB) is in MIG mode but the configuration has "
                          "mig-enabled: false for it; the agent does not switch MIG mode"},
                         {"all-disabled", "(nvidia-smi -i 0 -mig 0, with no pod using the GPU)"},
                         {"all-9g.1tb", "the mig-parted ConfigMap the agent read at start from " +
                                            host_dir_.path() + "/config.yaml"}}) {
    Label("nvidia.com/mig.config", c.name);
    ASSERT_TRUE(agent_->Resync().ok());
    EXPECT_EQ(State(), "failed") << c.name;
    std::vector<std::string> failed = Events(kReasonMigConfigFailed);
    ASSERT_FALSE(failed.empty());
    EXPECT_THAT(failed.back(), HasSubstr(c.name + " failed"));
    EXPECT_THAT(failed.back(), HasSubstr(c.says));
    EXPECT_THAT(failed.back(), ::testing::Not(HasSubstr("gpufrac mig"))) << "not a command here";
    EXPECT_EQ(Instances(), before) << c.name;
    Label("nvidia.com/mig.config", "two-3g");  // Each case is a new label.
    ASSERT_TRUE(agent_->Resync().ok());
  }

  // A default the file does not name is still there.
  Configure("all-7g.80gb");
  EXPECT_EQ(State(), "success");
  EXPECT_EQ(Labels()["nvidia.com/mig-7g.80gb.count"], "8");
}

}  // namespace
}  // namespace gpufrac::k8s
