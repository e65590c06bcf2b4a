// A burst of binds to one node, as when a deployment is scaled up: 56 pods bound at once through
// two extender replicas (as two kube-schedulers call bind) over HTTPS to an API server whose every
// write takes 20 ms. All must bind, fast, without any GPU booked past what it has.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "k8s/api_client.h"
#include "k8s/assignment.h"
#include "k8s/extender.h"
#include "k8s/fake_apiserver.h"
#include "k8s/kube_cluster_api.h"
#include "k8s/ledger.h"
#include "k8s/object_fields.h"
#include "k8s/test_objects.h"

namespace gpufrac::k8s {
namespace {

using testing::FakeApiServer;

constexpr int kGpus = 8;
constexpr int kPodsPerGpu = 7;
constexpr int kPods = kGpus * kPodsPerGpu;
constexpr int kMilli = 1000 / kPodsPerGpu;  // 142: seven fill a GPU.

// One extender replica: its own API connection and books.
struct Replica {
  std::unique_ptr<ApiClient> client;
  std::unique_ptr<KubeClusterApi> api;
  std::unique_ptr<Ledger> ledger;
  std::unique_ptr<Extender> extender;
};

TEST(ExtenderBindBurst, FiftySixPodsOnOneNodeThroughTwoExtendersAllBindWithinTenSeconds) {
  FakeApiServer::Options options;
  options.write_latency = std::chrono::milliseconds(20);
  auto server = FakeApiServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const NodeInventory inventory = testing::Inventory("n1", kGpus, "H100-80GB");
  json node = (*server)->Put(testing::NodeObject("n1", inventory));
  std::vector<json> pods;
  for (int i = 0; i < kPods; ++i) {
    pods.push_back((*server)->Put(
        testing::PodObject("p" + std::to_string(i), testing::FractionLimits(kMilli))));
  }

  std::vector<Replica> replicas(2);
  for (size_t r = 0; r < replicas.size(); ++r) {
    Replica& replica = replicas[r];
    auto client = ApiClient::Create((*server)->client_config());
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    replica.client = std::move(*client);
    replica.api = std::make_unique<KubeClusterApi>(replica.client.get());
    auto ledger = Ledger::Create();
    ASSERT_TRUE(ledger.ok());
    replica.ledger = std::move(*ledger);
    replica.extender =
        std::make_unique<Extender>(replica.ledger.get(), replica.api.get(),
                                   ExtenderOptions{.holder = "extender-" + std::to_string(r)});
    replica.extender->OnNode(node);
  }

  // kube-scheduler binds in a goroutine per pod: every bind at once, alternating replicas.
  std::vector<std::string> answers(kPods);
  std::vector<std::thread> threads;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kPods; ++i) {
    threads.emplace_back(
        [&, i] { answers[i] = replicas[i % 2].extender->Bind(testing::BindBody(pods[i], "n1")); });
  }
  for (std::thread& t : threads) t.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  int failed = 0;
  for (int i = 0; i < kPods; ++i) {
    EXPECT_EQ(json::parse(answers[i])["Error"], "") << "p" << i;
    failed += json::parse(answers[i])["Error"] != "";
  }
  std::printf(
      "bind burst: %d of %d pods bound to one node through 2 extenders, 20 ms a write: %.2f s, "
      "%.1f binds/s\n",
      kPods - failed, kPods, seconds, (kPods - failed) / seconds);
  EXPECT_EQ(failed, 0);
  EXPECT_LT(seconds, 10.0);

  // Every pod is bound to n1 with its own record, and no GPU holds more than it has.
  std::map<int, uint32_t> milli;
  std::map<int, uint64_t> memory;
  for (int i = 0; i < kPods; ++i) {
    std::optional<json> pod = (*server)->Get("pods", "default", "p" + std::to_string(i));
    ASSERT_TRUE(pod.has_value());
    EXPECT_EQ(PodNodeName(*pod), "n1") << "p" << i;
    std::optional<Assignment> a = AssignmentOf(*pod);
    ASSERT_TRUE(a.has_value()) << "p" << i << " has no assignment";
    EXPECT_EQ(a->node, "n1");
    ASSERT_EQ(a->containers.size(), 1u);
    ASSERT_EQ(a->containers[0].gpus.size(), 1u);
    const GpuGrant& g = a->containers[0].gpus[0];
    EXPECT_EQ(g.milli, static_cast<uint32_t>(kMilli));
    EXPECT_EQ(g.uuid, inventory.gpus.at(g.index).uuid);
    milli[g.index] += g.milli;
    memory[g.index] += g.memory_bytes;
  }
  for (const auto& [index, used] : milli) {
    EXPECT_LE(used, 1000u) << "GPU " << index;
    EXPECT_LE(memory[index], inventory.gpus.at(index).memory_bytes) << "GPU " << index;
  }
}

}  // namespace
}  // namespace gpufrac::k8s
