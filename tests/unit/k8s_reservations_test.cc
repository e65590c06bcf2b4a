// GPU reservation pods against an in-memory API server: one pod per GPU with fractional
// bookings and none for whole or MIG bookings, deleted with the last fraction, rebuilt by a
// restarted extender, never failing a bind, and the pod's body and name.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/text.h"
#include "k8s/assignment.h"
#include "k8s/extender.h"
#include "k8s/fake_cluster_api.h"
#include "k8s/inventory.h"
#include "k8s/ledger.h"
#include "k8s/object_fields.h"
#include "k8s/reservations.h"
#include "k8s/test_objects.h"

namespace gpufrac::k8s {
namespace {

using nlohmann::json;
using testing::BindBody;
using testing::FakeClusterApi;
using testing::FractionLimits;
using ::testing::HasSubstr;
using testing::Inventory;
using testing::NodeObject;
using testing::PodObject;
using testing::WithNvidiaGpus;

constexpr char kNs[] = "gpufrac-system";

// One extender with reservations on the shared fake API server.
struct Scheduler {
  std::unique_ptr<Ledger> ledger;
  std::unique_ptr<Reservations> reservations;
  std::unique_ptr<Extender> extender;

  explicit Scheduler(FakeClusterApi& api, ReservationOptions options = {}) {
    ledger = std::move(*Ledger::Create());
    reservations = std::make_unique<Reservations>(&api, std::move(options));
    extender = std::make_unique<Extender>(
        ledger.get(), &api, ExtenderOptions{.holder = "test", .reservations = reservations.get()});
    for (const json& node : api.AllNodes()) extender->OnNode(node);
  }
  std::string Bind(const json& pod, const std::string& node) {
    return json::parse(extender->Bind(BindBody(pod, node))).value("Error", "<missing>");
  }
};

class ReservationsTest : public ::testing::Test {
 protected:
  // n1: two shared H100s; whole: a whole-only A100; mig: an A100 in MIG mode.
  void SetUp() override {
    // NVIDIA's device plugin serves the GPUs too (nvidia.com/gpu), except the MIG one (mixed).
    api_.PutNode(WithNvidiaGpus(NodeObject("n1", Inventory("n1", 2, "H100-80GB")), 2));
    api_.PutNode(WithNvidiaGpus(
        NodeObject("whole", Inventory("whole", 1, "A100-80GB", GpuMode::kWhole)), 1));
    api_.PutNode(NodeObject("mig", Inventory("mig", 1, "A100-80GB", GpuMode::kMig)));
  }
  json AddPod(const std::string& name, json limits, json annotations = json::object()) {
    return api_.PutPod(PodObject(name, std::move(limits), std::move(annotations)));
  }
  json Stored(const std::string& name) { return *api_.Pod("default", name); }
  int GpuOf(const std::string& pod) {
    return AssignmentOf(Stored(pod))->containers.at(0).gpus.at(0).index;
  }
  // Makes the reservation pod `name` look created `seconds` ago.
  void Age(const std::string& name, int seconds) {
    json pod = *api_.Pod(kNs, name);
    pod["metadata"]["creationTimestamp"] = Rfc3339(
        std::chrono::system_clock::now() - std::chrono::seconds(seconds));
    api_.PutPod(pod);
  }
  // The reservation pods as "name -> reserved UUID".
  std::map<std::string, std::string> Reserved() {
    std::map<std::string, std::string> out;
    for (const json& pod : api_.PodsIn(kNs)) {
      out[pod["metadata"]["name"]] =
          pod["metadata"]["annotations"].value("gpufrac.io/reserves", "");
    }
    return out;
  }

  FakeClusterApi api_;
};

TEST_F(ReservationsTest, FirstFractionOnAGpuCreatesExactlyOneReservation) {
  Scheduler e(api_);
  ASSERT_EQ(e.Bind(AddPod("a", FractionLimits(300)), "n1"), "");
  EXPECT_EQ(api_.create_calls(), 0) << "the bind itself makes no reservation";
  e.reservations->Sync();
  const int gpu = GpuOf("a");
  const std::string name = "gpufrac-reserve-n1-gpu" + std::to_string(gpu);
  EXPECT_EQ(Reserved(),
            (std::map<std::string, std::string>{{name, "GPU-n1-" + std::to_string(gpu)}}));

  // A second fraction on the same GPU: still one.
  ASSERT_EQ(e.Bind(AddPod("b", FractionLimits(300)), "n1"), "");
  ASSERT_EQ(GpuOf("b"), gpu) << "the policy packs fractions onto one GPU";
  e.reservations->Sync();
  e.reservations->Sync();
  EXPECT_EQ(Reserved().size(), 1u);
  EXPECT_EQ(api_.create_calls(), 1);
  EXPECT_EQ(e.reservations->stats().created, 1u);
}

TEST_F(ReservationsTest, WholeGpuAndMigBookingsGetNone) {
  Scheduler e(api_);
  ASSERT_EQ(e.Bind(AddPod("whole", {{"gpufrac.io/gpu", "1"}}), "whole"), "");
  ASSERT_EQ(e.Bind(AddPod("two", {{"gpufrac.io/gpu", "2"}}), "n1"), "");
  ASSERT_EQ(e.Bind(AddPod("m", {{"gpufrac.io/gpu", "1"}}, {{"gpufrac.io/mig-profile", "1g.10gb"}}),
                   "mig"),
            "");
  ASSERT_EQ(e.ledger->booking_count(), 3u);
  e.reservations->Sync();
  ASSERT_TRUE(e.reservations->Reconcile().ok());
  EXPECT_TRUE(Reserved().empty());
  EXPECT_EQ(e.reservations->wanted(), 0u);
  EXPECT_EQ(api_.create_calls(), 0);
}

TEST_F(ReservationsTest, TheLastFractionGoingDeletesTheReservation) {
  Scheduler e(api_);
  ASSERT_EQ(e.Bind(AddPod("a", FractionLimits(300)), "n1"), "");
  ASSERT_EQ(e.Bind(AddPod("b", FractionLimits(300)), "n1"), "");
  e.reservations->Sync();
  ASSERT_EQ(Reserved().size(), 1u);

  // One pod deleted: the other still holds a fraction.
  json a = Stored("a");
  (void)api_.DeletePod("default", "a", "");
  e.extender->OnPodDeleted(a);
  e.reservations->Sync();
  EXPECT_EQ(Reserved().size(), 1u);

  // The other finishes: nothing left on the GPU.
  e.extender->OnPod(api_.SetPodPhase("default", "b", "Succeeded"));
  e.reservations->Sync();
  EXPECT_TRUE(Reserved().empty());
  EXPECT_EQ(e.reservations->stats().deleted, 1u);

  // A new fraction brings it back.
  ASSERT_EQ(e.Bind(AddPod("c", FractionLimits(500)), "n1"), "");
  e.reservations->Sync();
  EXPECT_EQ(Reserved().size(), 1u);
}

TEST_F(ReservationsTest, ARestartedExtenderReconcilesFromThePods) {
  std::string kept, stale;
  {
    Scheduler before(api_);
    ASSERT_EQ(before.Bind(AddPod("a", FractionLimits(600)), "n1"), "");
    ASSERT_EQ(before.Bind(AddPod("b", FractionLimits(600)), "n1"), "");  // Does not fit with a.
    before.reservations->Sync();
    ASSERT_EQ(Reserved().size(), 2u);
    kept = "gpufrac-reserve-n1-gpu" + std::to_string(GpuOf("a"));
    stale = "gpufrac-reserve-n1-gpu" + std::to_string(GpuOf("b"));
  }
  // While no extender ran: b ended (its reservation is now an orphan) and a's reservation was
  // deleted by someone.
  api_.SetPodPhase("default", "b", "Failed");
  Age(stale, 600);
  (void)api_.DeletePod(kNs, kept, "");

  Scheduler after(api_);
  // The watches deliver every pod (reservation pods included) before the first reconcile.
  for (const json& pod : api_.AllPods()) after.extender->OnPod(pod);
  ASSERT_TRUE(after.reservations->Reconcile().ok());
  std::map<std::string, std::string> reserved = Reserved();
  ASSERT_EQ(reserved.size(), 1u);
  EXPECT_EQ(reserved.begin()->first, kept);
  EXPECT_EQ(reserved.begin()->second, "GPU-n1-" + std::to_string(GpuOf("a")));
  EXPECT_FALSE(api_.Pod(kNs, stale).has_value());

  // Reconciling again changes nothing.
  const int creates = api_.create_calls(), deletes = api_.delete_calls();
  ASSERT_TRUE(after.reservations->Reconcile().ok());
  EXPECT_EQ(api_.create_calls(), creates);
  EXPECT_EQ(api_.delete_calls(), deletes);
}

TEST_F(ReservationsTest, AReplicaThatHasNotSeenABindKeepsItsFreshReservation) {
  Scheduler a(api_);
  ASSERT_EQ(a.Bind(AddPod("p", FractionLimits(300)), "n1"), "");
  a.reservations->Sync();
  const std::string name = "gpufrac-reserve-n1-gpu" + std::to_string(GpuOf("p"));
  ASSERT_EQ(Reserved().count(name), 1u);

  // Replica b's watch has not delivered the bind yet: the reservation looks like an orphan to it,
  // but it is younger than the grace period.
  Scheduler b(api_);
  ASSERT_TRUE(b.reservations->Reconcile().ok());
  EXPECT_EQ(Reserved().count(name), 1u);
  EXPECT_EQ(b.reservations->stats().deleted, 0u);

  // Once b has seen the bind, the reservation is wanted whatever its age.
  b.extender->OnPod(Stored("p"));
  Age(name, 600);
  ASSERT_TRUE(b.reservations->Reconcile().ok());
  EXPECT_EQ(Reserved().count(name), 1u);

  // A true orphan (its pod gone while no extender watched) goes once the grace is over.
  (void)api_.DeletePod("default", "p", "");
  Scheduler c(api_);
  ASSERT_TRUE(c.reservations->Reconcile().ok());
  EXPECT_TRUE(Reserved().empty());
  EXPECT_EQ(c.reservations->stats().deleted, 1u);
}

TEST_F(ReservationsTest, AReplicaThatSawTheLastFractionEndLeavesANewerReservationAlone) {
  api_.PutNode(WithNvidiaGpus(NodeObject("solo", Inventory("solo", 1, "H100-80GB")), 1));
  Scheduler a(api_);
  Scheduler b(api_);
  ASSERT_EQ(a.Bind(AddPod("p1", FractionLimits(300)), "solo"), "");
  a.reservations->Sync();
  const std::string name = "gpufrac-reserve-solo-gpu0";
  const std::string first_uid = api_.Pod(kNs, name)->at("metadata").at("uid");
  b.extender->OnPod(Stored("p1"));
  ASSERT_TRUE(b.reservations->Reconcile().ok());  // b knows the reservation, by its uid.

  // p1 ends and p2 takes the GPU; replica a sees both and replaces the reservation.
  a.extender->OnPod(api_.SetPodPhase("default", "p1", "Succeeded"));
  a.reservations->Sync();
  ASSERT_EQ(a.Bind(AddPod("p2", FractionLimits(500)), "solo"), "");
  a.reservations->Sync();
  const std::string second_uid = api_.Pod(kNs, name)->at("metadata").at("uid");
  ASSERT_NE(second_uid, first_uid);

  // Replica b has seen p1 end but not yet p2's bind: it deletes only the pod it knew.
  b.extender->OnPod(Stored("p1"));
  b.reservations->Sync();
  ASSERT_TRUE(api_.Pod(kNs, name).has_value());
  EXPECT_EQ(api_.Pod(kNs, name)->at("metadata").at("uid"), second_uid);
  EXPECT_EQ(b.reservations->stats().deleted, 0u);
}

TEST_F(ReservationsTest, AFailedCreationNeverFailsTheBindAndIsRetriedAtReconcile) {
  Scheduler e(api_);
  api_.FailNextCreatePod(UnavailableError("etcdserver: request timed out"));
  ASSERT_EQ(e.Bind(AddPod("a", FractionLimits(300)), "n1"), "");
  EXPECT_EQ(e.extender->stats().bind_failures, 0u);
  e.reservations->Sync();
  EXPECT_TRUE(Reserved().empty());
  EXPECT_EQ(e.reservations->stats().failures, 1u);
  ASSERT_TRUE(e.reservations->Reconcile().ok());
  EXPECT_EQ(Reserved().size(), 1u);

  // A failed list is reported by Reconcile and changes nothing.
  api_.FailNextListPods(UnavailableError("connection refused"));
  Status s = e.reservations->Reconcile();
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("connection refused"));
  EXPECT_EQ(Reserved().size(), 1u);
}

TEST_F(ReservationsTest, AFailedDeletionIsRetriedAtReconcile) {
  Scheduler e(api_);
  ASSERT_EQ(e.Bind(AddPod("a", FractionLimits(300)), "n1"), "");
  e.reservations->Sync();
  api_.FailNextDeletePod(UnavailableError("etcdserver: leader changed"));
  e.extender->OnPod(api_.SetPodPhase("default", "a", "Succeeded"));
  e.reservations->Sync();
  EXPECT_EQ(Reserved().size(), 1u);
  ASSERT_TRUE(e.reservations->Reconcile().ok());
  EXPECT_TRUE(Reserved().empty());
}

TEST_F(ReservationsTest, AReservationPodThatEndedIsReplaced) {
  Scheduler e(api_);
  ASSERT_EQ(e.Bind(AddPod("a", FractionLimits(300)), "n1"), "");
  e.reservations->Sync();
  ASSERT_EQ(Reserved().size(), 1u);
  const std::string name = Reserved().begin()->first;
  const std::string uid = api_.Pod(kNs, name)->at("metadata").at("uid");
  api_.SetPodPhase(kNs, name, "Failed");  // E.g. the kubelet had no nvidia.com/gpu left.
  ASSERT_TRUE(e.reservations->Reconcile().ok());
  std::optional<json> now = api_.Pod(kNs, name);
  ASSERT_TRUE(now.has_value());
  EXPECT_NE((*now)["metadata"]["uid"], uid);
  EXPECT_FALSE(now->contains("status") && (*now)["status"].value("phase", "") == "Failed");
}

TEST_F(ReservationsTest, NoReservationsWhereTheAgentServesNvidiaGpuItself) {
  api_.PutNode(NodeObject("own", Inventory("own", 1, "H100-80GB"),
                          {{"gpufrac.io/nvidia-gpu-plugin", "true"}}));
  Scheduler e(api_);
  ASSERT_EQ(e.Bind(AddPod("a", FractionLimits(300)), "own"), "");
  ASSERT_EQ(e.Bind(AddPod("b", FractionLimits(300)), "n1"), "");
  e.reservations->Sync();
  ASSERT_EQ(Reserved().size(), 1u);
  EXPECT_THAT(Reserved().begin()->first, HasSubstr("-n1-"));

  // n1's agent starts serving nvidia.com/gpu: its reservation goes.
  json n1 = WithNvidiaGpus(
      NodeObject("n1", Inventory("n1", 2, "H100-80GB"), {{"gpufrac.io/nvidia-gpu-plugin", "true"}}),
      2);
  e.extender->OnNode(n1);
  e.reservations->Sync();
  EXPECT_TRUE(Reserved().empty());
}

// The kubelet drops a resource its node does not advertise and admits the pod anyway: on a node
// where nothing serves nvidia.com/gpu a reservation pod would run and reserve nothing. None is
// made there, the pod's event says so, and one is made once the node advertises nvidia.com/gpu.
TEST_F(ReservationsTest, NoReservationsOnANodeThatAdvertisesNoNvidiaGpu) {
  api_.PutNode(NodeObject("bare", Inventory("bare", 1, "H100-80GB")));
  Scheduler e(api_);
  ASSERT_EQ(e.Bind(AddPod("a", FractionLimits(300)), "bare"), "");
  e.reservations->Sync();
  ASSERT_TRUE(e.reservations->Reconcile().ok());
  EXPECT_TRUE(Reserved().empty());
  EXPECT_EQ(api_.create_calls(), 0);
  bool told = false;
  for (const FakeClusterApi::Event& e : api_.events()) {
    if (e.pod == "default/a" && e.reason == "GpufracNotReserved") {
      told = true;
      EXPECT_THAT(e.message, HasSubstr("advertises no nvidia.com/gpu"));
    }
  }
  EXPECT_TRUE(told);

  // NVIDIA's device plugin starts on the node: the fraction's GPU is reserved.
  e.extender->OnNode(WithNvidiaGpus(NodeObject("bare", Inventory("bare", 1, "H100-80GB")), 1));
  e.reservations->Sync();
  EXPECT_EQ(Reserved().size(), 1u);
}

TEST_F(ReservationsTest, TheWorkerCreatesAndDeletesOnItsOwn) {
  Scheduler e(api_, {.settle = std::chrono::milliseconds(10)});
  e.reservations->Start([] { return true; });
  ASSERT_EQ(e.Bind(AddPod("a", FractionLimits(300)), "n1"), "");
  auto eventually = [](auto f) {
    for (int i = 0; i < 200 && !f(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return f();
  };
  EXPECT_TRUE(eventually([&] { return Reserved().size() == 1; }));
  e.extender->OnPodDeleted(Stored("a"));
  EXPECT_TRUE(eventually([&] { return Reserved().empty(); }));
  e.reservations->Stop();
}

// ---- The pod ----

// The creation times Reconcile reads are in the API server's format.
TEST(ReservationPodTest, NameIsAStableDnsLabel) {
  EXPECT_EQ(ReservationPodName("gpu-node-1", 3), "gpufrac-reserve-gpu-node-1-gpu3");
  EXPECT_EQ(ReservationPodName("ip-10-0-0-1.ec2.internal", 0),
            "gpufrac-reserve-ip-10-0-0-1.ec2.internal-gpu0");
  const std::string long_a(80, 'a');
  const std::string long_b = long_a + "b";
  std::set<std::string> names;
  for (const std::string& node : {long_a, long_b}) {
    for (int gpu : {0, 7}) {
      std::string name = ReservationPodName(node, gpu);
      EXPECT_LE(name.size(), 63u) << name;
      EXPECT_EQ(name.rfind("gpufrac-reserve-", 0), 0u) << name;
      EXPECT_TRUE(name.ends_with("-gpu" + std::to_string(gpu))) << name;
      for (char c : name) {
        EXPECT_TRUE((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.')
            << name;
      }
      EXPECT_EQ(ReservationPodName(node, gpu), name) << "the same in every replica";
      names.insert(name);
    }
  }
  EXPECT_EQ(names.size(), 4u) << "long names sharing a beginning stay apart";
  // A name cut just before a dot must not leave "-." or ".-" behind.
  std::string dotted = std::string(46, 'x') + "." + std::string(30, 'y');
  std::string name = ReservationPodName(dotted, 1);
  EXPECT_EQ(name.find(".-"), std::string::npos) << name;
  EXPECT_EQ(name.find("-."), std::string::npos) << name;
}

TEST(ReservationPodTest, BodyAsksForOneNvidiaGpuOnItsNode) {
  ReservationOptions options;
  json pod = ReservationPod(options, "n1", 2, "GPU-abc");
  EXPECT_EQ(pod["metadata"]["name"], "gpufrac-reserve-n1-gpu2");
  EXPECT_EQ(pod["metadata"]["namespace"], "gpufrac-system");
  EXPECT_EQ(pod["metadata"]["labels"]["app.kubernetes.io/name"], "gpufrac-reservation");
  EXPECT_EQ(pod["metadata"]["annotations"]["gpufrac.io/reserves"], "GPU-abc");
  EXPECT_EQ(pod["metadata"]["annotations"]["gpufrac.io/node"], "n1");
  EXPECT_EQ(pod["spec"]["nodeName"], "n1");
  EXPECT_EQ(pod["spec"]["restartPolicy"], "Always");
  EXPECT_FALSE(pod["spec"].contains("priorityClassName"));
  EXPECT_FALSE(pod["spec"].contains("schedulerName"));
  EXPECT_EQ(pod["spec"]["tolerations"], json::parse(R"([{"operator": "Exists"}])"));
  ASSERT_EQ(pod["spec"]["containers"].size(), 1u);
  const json& c = pod["spec"]["containers"][0];
  EXPECT_EQ(c["image"], "registry.k8s.io/pause:3.9");
  EXPECT_EQ(c["resources"]["limits"]["nvidia.com/gpu"], "1");
  EXPECT_EQ(c["resources"]["requests"]["nvidia.com/gpu"], "1");
  EXPECT_EQ(c["resources"]["requests"], c["resources"]["limits"]) << "QoS Guaranteed";

  options.ns = "infra";
  options.image = "example.com/pause:1";
  options.priority_class = "gpufrac-reservation";
  pod = ReservationPod(options, "n1", 0, "GPU-abc");
  EXPECT_EQ(pod["metadata"]["namespace"], "infra");
  EXPECT_EQ(pod["spec"]["containers"][0]["image"], "example.com/pause:1");
  EXPECT_EQ(pod["spec"]["priorityClassName"], "gpufrac-reservation");
}

}  // namespace
}  // namespace gpufrac::k8s
