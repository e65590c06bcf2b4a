// The kube-scheduler extender protocol against an in-memory API server: the exact bodies
// kube-scheduler sends and reads (Go field names), bind's record-then-bind order and its
// failures (pod deleted mid-bind, conflicts, node gone), two extenders racing for one GPU, a
// restarted extender rebuilding its books from the watches, the node's pending bookings (conflicts,
// what they count and when they go, an earlier version's lock) and finished pods.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <latch>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/log.h"
#include "common/units.h"
#include "gpu/mig_catalogue.h"
#include "k8s/assignment.h"
#include "k8s/extender.h"
#include "k8s/fake_cluster_api.h"
#include "k8s/inventory.h"
#include "k8s/ledger.h"
#include "k8s/object_fields.h"
#include "k8s/pending_bookings.h"
#include "k8s/test_objects.h"

namespace gpufrac::k8s {
namespace {

using nlohmann::json;
using testing::BindBody;
using ::testing::ElementsAre;
using testing::FakeClusterApi;
using testing::FractionLimits;
using ::testing::HasSubstr;
using testing::Inventory;
using ::testing::IsEmpty;
using testing::NodeObject;
using testing::PodObject;
using ::testing::UnorderedElementsAre;

// ---- Objects as the API server holds them ----

// ---- Bodies exactly as kube-scheduler's HTTPExtender marshals them ----

// nodeCacheCapable: true.
std::string FilterByNames(const json& pod, const std::vector<std::string>& names) {
  return json{{"Pod", pod}, {"Nodes", nullptr}, {"NodeNames", names}}.dump();
}
// nodeCacheCapable: false.
std::string FilterByNodes(const json& pod, const std::vector<json>& nodes) {
  return json{{"Pod", pod},
              {"Nodes", {{"metadata", json::object()}, {"items", nodes}}},
              {"NodeNames", nullptr}}
      .dump();
}
// One extender with its own books on a shared fake API server.
struct Scheduler {
  std::unique_ptr<Ledger> ledger;
  std::unique_ptr<Extender> extender;

  Scheduler(FakeClusterApi& api, ExtenderOptions options = {}) {
    StatusOr<std::unique_ptr<Ledger>> l = Ledger::Create();
    EXPECT_TRUE(l.ok()) << l.status();
    ledger = std::move(*l);
    extender = std::make_unique<Extender>(ledger.get(), &api, std::move(options));
    for (const json& node : api.AllNodes()) extender->OnNode(node);
  }

  // The response body of Filter by names, parsed.
  json Filter(const json& pod, const std::vector<std::string>& names) {
    return json::parse(extender->Filter(FilterByNames(pod, names)));
  }
  // Bind's "Error" ("" on success).
  std::string Bind(const json& pod, const std::string& node) {
    json result = json::parse(extender->Bind(BindBody(pod, node)));
    EXPECT_TRUE(result.is_object() && result.contains("Error")) << result.dump();
    EXPECT_EQ(result.size(), 1u) << "ExtenderBindingResult has the one field Error";
    return result.value("Error", "<missing>");
  }
  bool Fits(const json& pod, const std::string& node) {
    json r = Filter(pod, {node});
    return r["NodeNames"] == json::array({node});
  }
};

class ExtenderTest : public ::testing::Test {
 protected:
  // n1: one shared A100-80GB; n2: one whole-only A100-80GB; cpu: no gpufrac agent.
  void SetUp() override {
    n1_ = Inventory("n1", 1, "A100-80GB");
    n2_ = Inventory("n2", 1, "A100-80GB", GpuMode::kWhole);
    api_.PutNode(NodeObject("n1", &n1_));
    api_.PutNode(NodeObject("n2", &n2_));
    api_.PutNode(NodeObject("cpu", nullptr));
  }

  json AddPod(const std::string& name, json limits, json annotations = json::object()) {
    return api_.PutPod(PodObject(name, std::move(limits), std::move(annotations)));
  }
  json Stored(const std::string& name) {
    std::optional<json> pod = api_.Pod("default", name);
    EXPECT_TRUE(pod.has_value()) << name;
    return pod.value_or(json::object());
  }
  static std::string NodeNameOf(const json& pod) {
    return pod.contains("spec") ? pod["spec"].value("nodeName", "") : "";
  }
  static std::string AssignmentText(const json& pod) {
    if (!pod.contains("metadata") || !pod["metadata"].contains("annotations")) return "";
    return pod["metadata"]["annotations"].value(std::string(kAnnotationAssignment), "");
  }

  NodeInventory n1_, n2_;
  FakeClusterApi api_;
};

// ---- Filter ----

TEST_F(ExtenderTest, FilterByNodeNames) {
  Scheduler s(api_);
  json pod = AddPod("p", FractionLimits(500));
  json r = json::parse(s.extender->Filter(FilterByNames(pod, {"n1", "n2", "cpu"})));
  std::set<std::string> keys;
  for (auto it = r.begin(); it != r.end(); ++it) keys.insert(it.key());
  EXPECT_EQ(keys, (std::set<std::string>{"Nodes", "NodeNames", "FailedNodes",
                                         "FailedAndUnresolvableNodes", "Error"}));
  EXPECT_EQ(r["NodeNames"], json::array({"n1"}));
  EXPECT_TRUE(r["Nodes"].is_null());
  EXPECT_EQ(r["Error"], "");
  ASSERT_TRUE(r["FailedNodes"].is_object());
  EXPECT_EQ(r["FailedNodes"].size(), 2u);
  EXPECT_THAT(r["FailedNodes"].value("n2", ""), HasSubstr("whole"));
  EXPECT_THAT(r["FailedNodes"].value("cpu", ""), HasSubstr("no gpufrac agent"));
  EXPECT_EQ(r["FailedAndUnresolvableNodes"], json::object());
  EXPECT_EQ(s.extender->stats().filters, 1u);
}

TEST_F(ExtenderTest, FilterByFullNodes) {
  Scheduler s(api_);
  json pod = AddPod("p", {{"gpufrac.io/gpu", "1"}});
  std::vector<json> nodes = api_.AllNodes();  // cpu, n1, n2
  json r = json::parse(s.extender->Filter(FilterByNodes(pod, nodes)));
  EXPECT_TRUE(r["NodeNames"].is_null());
  ASSERT_TRUE(r["Nodes"].is_object());
  ASSERT_TRUE(r["Nodes"]["items"].is_array());
  ASSERT_EQ(r["Nodes"]["items"].size(), 2u);
  // The node objects come back as they were sent.
  EXPECT_EQ(r["Nodes"]["items"][0], nodes[1]);
  EXPECT_EQ(r["Nodes"]["items"][1], nodes[2]);
  EXPECT_EQ(r["FailedNodes"].size(), 1u);
  EXPECT_TRUE(r["FailedNodes"].contains("cpu"));
  EXPECT_EQ(r["Error"], "");
}

TEST_F(ExtenderTest, FilterReadsGoNamesIgnoringCase) {
  Scheduler s(api_);
  json pod = AddPod("p", FractionLimits(500));
  json r = json::parse(s.extender->Filter(json{{"pod", pod}, {"nodenames", {"n1", "n2"}}}.dump()));
  EXPECT_EQ(r["NodeNames"], json::array({"n1"}));
}

TEST_F(ExtenderTest, FilterOfAnInvalidRequestIsUnresolvableEverywhereWithOneWarning) {
  Scheduler s(api_);
  json pod = AddPod("bad", {{"gpufrac.io/gpu", "1"},
                            {"gpufrac.io/gpu-memory", "4096"},
                            {"gpufrac.io/gpu-fraction", "250"}});
  json r = s.Filter(pod, {"n1", "n2"});
  EXPECT_EQ(r["NodeNames"], json::array());
  EXPECT_EQ(r["FailedNodes"], json::object());
  EXPECT_EQ(r["Error"], "");
  ASSERT_EQ(r["FailedAndUnresolvableNodes"].size(), 2u);
  for (const char* n : {"n1", "n2"}) {
    std::string why = r["FailedAndUnresolvableNodes"].value(n, "");
    EXPECT_THAT(why, HasSubstr("gpufrac.io/gpu-memory")) << n;
    EXPECT_THAT(why, HasSubstr("gpufrac.io/gpu-fraction")) << n;
  }
  std::vector<FakeClusterApi::Event> events = api_.events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].pod, "default/bad");
  EXPECT_TRUE(events[0].warning);
  EXPECT_THAT(events[0].message, HasSubstr("gpufrac.io/gpu-fraction"));
}

TEST_F(ExtenderTest, FilterOfABadBodyAnswersWithAnError) {
  Scheduler s(api_);
  for (const char* body : {"not json", "{}", R"({"Pod": {}, "NodeNames": null, "Nodes": null})"}) {
    json r = json::parse(s.extender->Filter(body));
    EXPECT_FALSE(r.value("Error", "").empty()) << body;
  }
}

// A pod that asks for no GPU must still be schedulable everywhere, including on nodes with no
// gpufrac agent: the extender is called for every pod (KAI pods ask by annotation only).
TEST_F(ExtenderTest, FilterKeepsEveryNodeForAPodWithoutGpus) {
  Scheduler s(api_);
  json pod = AddPod("web", {{"cpu", "1"}});
  json r = s.Filter(pod, {"n1", "n2", "cpu"});
  EXPECT_EQ(r["NodeNames"], json::array({"n1", "n2", "cpu"})) << r.dump();
  EXPECT_EQ(r["FailedNodes"], json::object());
}

// ---- Prioritize ----

TEST_F(ExtenderTest, PrioritizeScoresFromZeroToTenWithTheBestAtTen) {
  NodeInventory n3 = Inventory("n3", 2, "A100-80GB"), n4 = Inventory("n4", 1, "A100-80GB");
  api_.PutNode(NodeObject("n3", &n3));
  api_.PutNode(NodeObject("n4", &n4));
  Scheduler s(api_);
  ASSERT_EQ(s.Bind(AddPod("half", FractionLimits(500)), "n1"), "");
  ASSERT_EQ(s.Bind(AddPod("full", {{"gpufrac.io/gpu", "1"}}), "n4"), "");

  json pod = AddPod("p", FractionLimits(500));
  std::string body = FilterByNames(pod, {"n1", "n2", "n3", "n4"});
  json list = json::parse(s.extender->Prioritize(body));
  ASSERT_TRUE(list.is_array());
  ASSERT_EQ(list.size(), 4u);
  int64_t best = -1;
  std::string best_host;
  for (size_t i = 0; i < list.size(); ++i) {
    EXPECT_EQ(list[i].size(), 2u) << "HostPriority is {Host, Score}";
    EXPECT_EQ(list[i]["Host"], std::vector<std::string>({"n1", "n2", "n3", "n4"})[i]);
    int64_t score = list[i]["Score"].get<int64_t>();
    EXPECT_GE(score, 0);
    EXPECT_LE(score, 10);
    if (score > best) {
      best = score;
      best_host = list[i]["Host"];
    }
  }
  EXPECT_EQ(best, 10);
  EXPECT_TRUE(best_host == "n1" || best_host == "n3") << best_host;
  EXPECT_EQ(list[1]["Score"], 0) << "n2 is whole-only";
  EXPECT_EQ(list[3]["Score"], 0) << "n4 is full";
  EXPECT_EQ(s.extender->stats().prioritizes, 1u);
}

// Issue 29: a busy node and an empty one got the same score (10 and 10) when the policy's coarse
// scores tied; packing prefers the busier node, also when the pod goes on a free GPU of it.
TEST_F(ExtenderTest, PrioritizePrefersTheBusierOfNodesThePolicyScoresAlike) {
  NodeInventory busy = Inventory("busy", 2, "A100-80GB"),
                empty = Inventory("empty", 2, "A100-80GB");
  api_.PutNode(NodeObject("busy", &busy));
  api_.PutNode(NodeObject("empty", &empty));
  Scheduler s(api_);
  ASSERT_EQ(s.Bind(AddPod("big", FractionLimits(900)), "busy"), "");
  for (int milli : {250, 500, 100}) {
    json pod = AddPod("p" + std::to_string(milli), FractionLimits(milli));
    json list = json::parse(s.extender->Prioritize(FilterByNames(pod, {"empty", "busy"})));
    ASSERT_EQ(list.size(), 2u);
    EXPECT_EQ(list[0]["Host"], "empty");
    EXPECT_EQ(list[0]["Score"], 0) << milli << ": " << list.dump();
    EXPECT_EQ(list[1]["Score"], 10) << milli << ": " << list.dump();
  }
}

TEST_F(ExtenderTest, PrioritizeGivesTenToEqualNodesAndNothingForBadBodies) {
  NodeInventory n3 = Inventory("n3", 1, "A100-80GB");
  api_.PutNode(NodeObject("n3", &n3));
  Scheduler s(api_);
  json pod = AddPod("p", FractionLimits(300));
  json list = json::parse(s.extender->Prioritize(FilterByNames(pod, {"n1", "n3"})));
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0]["Score"], 10);
  EXPECT_EQ(list[1]["Score"], 10);
  EXPECT_EQ(json::parse(s.extender->Prioritize("garbage")), json::array());
}

// ---- Bind ----

TEST_F(ExtenderTest, BindRecordsTheAssignmentThenBindsAndBooks) {
  Scheduler s(api_);
  json pod = AddPod("p", FractionLimits(600));
  std::string annotation_at_bind = "<bind not called>";
  api_.BeforeNextBind([&] { annotation_at_bind = AssignmentText(Stored("p")); });

  ASSERT_EQ(s.Bind(pod, "n1"), "");
  EXPECT_FALSE(annotation_at_bind.empty()) << "the assignment is written before the binding";

  json stored = Stored("p");
  EXPECT_EQ(NodeNameOf(stored), "n1");
  StatusOr<Assignment> a = AssignmentFromJson(json::parse(AssignmentText(stored)));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(AssignmentText(stored), annotation_at_bind);
  EXPECT_EQ(a->node, "n1");
  EXPECT_GT(a->time_ms, 0);
  ASSERT_EQ(a->containers.size(), 1u);
  EXPECT_EQ(a->containers[0].container, "main");
  ASSERT_EQ(a->containers[0].gpus.size(), 1u);
  EXPECT_EQ(a->containers[0].gpus[0].index, 0);
  EXPECT_EQ(a->containers[0].gpus[0].uuid, "GPU-n1-0");
  EXPECT_EQ(a->containers[0].gpus[0].milli, 600u);

  ASSERT_TRUE(s.ledger->BookingOf("default/p").has_value());
  EXPECT_EQ(*s.ledger->BookingOf("default/p"), *a);
  std::vector<PendingBooking> pending = api_.PendingOn("n1");
  ASSERT_EQ(pending.size(), 1u) << "the booking stays pending until a later bind sees p bound";
  EXPECT_EQ(pending[0].pod, "default/p");
  EXPECT_EQ(pending[0].uid, pod["metadata"]["uid"]);
  EXPECT_EQ(pending[0].assignment, *a);

  // The next pod sees what is left.
  EXPECT_FALSE(s.Fits(AddPod("q", FractionLimits(600)), "n1"));
  EXPECT_TRUE(s.Fits(AddPod("r", FractionLimits(400)), "n1"));

  bool assigned_event = false;
  for (const FakeClusterApi::Event& e : api_.events()) {
    if (e.pod == "default/p" && !e.warning && e.message.find("n1") != std::string::npos) {
      assigned_event = true;
    }
  }
  EXPECT_TRUE(assigned_event);
  EXPECT_EQ(s.extender->stats().binds, 1u);
  EXPECT_EQ(s.extender->stats().bind_failures, 0u);
}

// --verbose (debug logs): one line per filter, prioritize and bind outcome, naming the pod, what
// each node said, and the GPUs a bind gave; the pod's name is escaped (it is the user's).
TEST_F(ExtenderTest, VerboseLogsEveryDecisionInOneLine) {
  Scheduler s(api_);
  json pod = AddPod("p\x1b[2J", FractionLimits(600));
  SetLogLevel(LogLevel::kDebug);
  ::testing::internal::CaptureStderr();
  s.Filter(pod, {"n1", "n2", "cpu"});
  s.extender->Prioritize(FilterByNames(pod, {"n1"}));
  ASSERT_EQ(s.Bind(pod, "n1"), "");
  s.Bind(AddPod("q", FractionLimits(600)), "n1");
  const std::string log = ::testing::internal::GetCapturedStderr();
  SetLogLevel(LogLevel::kInfo);
  std::printf("%s", log.c_str());
  std::vector<std::string> lines;
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 4u) << log;
  EXPECT_THAT(lines[0], HasSubstr("filter default/p\\x1b[2J: 1 of 3 nodes fit; n2: "));
  EXPECT_THAT(lines[0], HasSubstr("cpu: "));
  EXPECT_THAT(lines[1], HasSubstr("prioritize default/p\\x1b[2J: n1: 10"));
  EXPECT_THAT(lines[2], HasSubstr("bind default/p\\x1b[2J to n1: "));
  EXPECT_THAT(lines[2], HasSubstr("GPU 0"));
  EXPECT_THAT(lines[3], HasSubstr("warning: bind default/q to n1: "));
  EXPECT_EQ(log.find('\x1b'), std::string::npos) << "the pod's name reaches the log escaped";
}

// Compute requests are what a shared GPU's share is made of: once they add up to the GPU, a pod
// asking for a little memory does not fit, however much memory is free.
TEST_F(ExtenderTest, ComputeRequestsUsedUpRefuseAPodThoughMemoryIsFree) {
  Scheduler s(api_);
  json heavy = AddPod("heavy",
                      {{"gpufrac.io/gpu", "1"},
                       {"gpufrac.io/gpu-memory", "4096"},
                       {"gpufrac.io/gpu-compute", "700"}},
                      {{"gpufrac.io/gpu-compute-limit", "0.9"}});
  ASSERT_EQ(s.Bind(heavy, "n1"), "");
  StatusOr<Assignment> a = AssignmentFromJson(json::parse(AssignmentText(Stored("heavy"))));
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->containers.size(), 1u);
  EXPECT_EQ(a->containers[0].gpus.at(0).milli, 700u) << "the booked share is the compute request";
  EXPECT_EQ(a->containers[0].gpus.at(0).memory_bytes, uint64_t{4096} << 20);
  EXPECT_EQ(a->containers[0].compute_limit_milli, 900u) << "recorded for the node agent";

  // 4 GiB of 80 are booked, 0.3 of the GPU's time is left.
  json light = AddPod("light", {{"gpufrac.io/gpu", "1"},
                                {"gpufrac.io/gpu-memory", "1024"},
                                {"gpufrac.io/gpu-compute", "400"}});
  json r = s.Filter(light, {"n1"});
  EXPECT_EQ(r["NodeNames"], json::array()) << r.dump();
  EXPECT_THAT(r["FailedNodes"].value("n1", ""), HasSubstr("gpufrac.io/gpu-compute: 0.4"));
  EXPECT_THAT(r["FailedNodes"].value("n1", ""), HasSubstr("not enough free GPU capacity"));
  // A fraction of the memory takes that share of the GPU's time unless it says otherwise.
  EXPECT_FALSE(s.Fits(AddPod("half", FractionLimits(500)), "n1"));
  EXPECT_TRUE(s.Fits(AddPod("third", {{"gpufrac.io/gpu", "1"},
                                      {"gpufrac.io/gpu-fraction", "500"},
                                      {"gpufrac.io/gpu-compute", "300"}}),
                     "n1"));
  EXPECT_TRUE(s.Fits(AddPod("small", FractionLimits(300)), "n1"));
}

TEST_F(ExtenderTest, BindOfAPodWithoutGpusBindsWithoutAnAssignment) {
  Scheduler s(api_);
  json pod = AddPod("web", {{"cpu", "1"}});
  ASSERT_EQ(s.Bind(pod, "cpu"), "");
  json stored = Stored("web");
  EXPECT_EQ(NodeNameOf(stored), "cpu");
  EXPECT_EQ(AssignmentText(stored), "");
  EXPECT_EQ(s.ledger->booking_count(), 0u);
}

TEST_F(ExtenderTest, BindOfAMigPodRecordsThePlacement) {
  NodeInventory mig = Inventory("mig", 1, "H100-80GB", GpuMode::kMig);
  api_.PutNode(NodeObject("mig", &mig));
  Scheduler s(api_);
  json pod = AddPod("m", {{"gpufrac.io/gpu", "1"}}, {{"gpufrac.io/mig-profile", "3g.40gb"}});
  ASSERT_EQ(s.Bind(pod, "mig"), "");
  StatusOr<Assignment> a = AssignmentFromJson(json::parse(AssignmentText(Stored("m"))));
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(a->containers[0].gpus[0].mig.has_value());
  EXPECT_EQ(a->containers[0].gpus[0].mig->profile, "3g.40gb");
  EXPECT_TRUE(s.Fits(
      AddPod("m2", {{"gpufrac.io/gpu", "1"}}, {{"gpufrac.io/mig-profile", "3g.40gb"}}), "mig"));
  ASSERT_EQ(s.Bind(Stored("m2"), "mig"), "");
  EXPECT_FALSE(s.Fits(
      AddPod("m3", {{"gpufrac.io/gpu", "1"}}, {{"gpufrac.io/mig-profile", "1g.10gb"}}), "mig"));
}

// A fraction or a memory on a MIG GPU gets the smallest profile that holds it by its slices or its
// name's size, whose memory can be a little less than asked: the pod's event says what it got,
// and by how much it is less.
TEST_F(ExtenderTest, AMigInstanceForAFractionOrAMemorySaysWhatItHolds) {
  NodeInventory mig = Inventory("mig", 1, "H100-80GB", GpuMode::kMig);
  api_.PutNode(NodeObject("mig", &mig));
  Scheduler s(api_);
  const gpu::MigModel& model = *gpu::FindMigModel("H100-80GB");
  auto memory_of = [&](const char* profile) {
    return FormatSize(gpu::FindMigProfile(model, profile)->memory_bytes);
  };
  ASSERT_EQ(s.Bind(AddPod("quarter", FractionLimits(250)), "mig"), "");
  ASSERT_EQ(
      s.Bind(AddPod("ten", {{"gpufrac.io/gpu", "1"}, {"gpufrac.io/gpu-memory", "10240"}}), "mig"),
      "");
  std::map<std::string, std::string> assigned;
  for (const FakeClusterApi::Event& e : api_.events()) {
    if (e.reason == "GpufracAssigned") assigned[e.pod] = e.message;
  }
  std::printf("%s\n%s\n", assigned["default/quarter"].c_str(), assigned["default/ten"].c_str());
  EXPECT_THAT(assigned["default/quarter"], HasSubstr("MIG 2g.20gb at "));
  // Issue 29: the fraction's case says how much less than its share of the GPU's memory too.
  const uint64_t quarter = mig.gpus[0].memory_bytes / 1000 * 250;
  const uint64_t instance = gpu::FindMigProfile(model, "2g.20gb")->memory_bytes;
  ASSERT_LT(instance, quarter) << "H100-80GB's 2g.20gb holds a little less than a quarter";
  EXPECT_THAT(
      assigned["default/quarter"],
      HasSubstr("(" + memory_of("2g.20gb") + " for 0.25, " + FormatSize(quarter - instance) +
                " less than 0.25 of the GPU's " + FormatSize(mig.gpus[0].memory_bytes) +
                ": the smallest profile whose name's size and compute slices hold that "
                "share)"));
  EXPECT_THAT(assigned["default/ten"], HasSubstr("MIG 1g.10gb at "));
  EXPECT_THAT(assigned["default/ten"],
              HasSubstr("(" + memory_of("1g.10gb") + ", " +
                        FormatSize((uint64_t{10} << 30) -
                                   gpu::FindMigProfile(model, "1g.10gb")->memory_bytes) +
                        " less than the 10 GiB asked: the smallest profile whose name's size "
                        "holds it)"));
}

// Issue 29: a container that can unmount the limiter (privileged, or adding SYS_ADMIN) is given
// no share of a shared GPU unless the operator allows it (the extender's option or a label on the
// pod's namespace); whole GPUs and MIG instances it may have, where it can only hurt itself.
TEST_F(ExtenderTest, APodThatCanRemoveItsLimitsSharesNoGpuUnlessAllowed) {
  NodeInventory mig = Inventory("mig", 1, "H100-80GB", GpuMode::kMig);
  api_.PutNode(NodeObject("mig", &mig));
  Scheduler s(api_);
  auto privileged = [&](const std::string& name, json limits, const std::string& ns = "default") {
    json pod = testing::PodObject(name, std::move(limits), json::object(), ns);
    pod["spec"]["containers"][0]["securityContext"] = {{"capabilities", {{"add", {"SYS_ADMIN"}}}}};
    return api_.PutPod(pod);
  };
  const std::string why =
      "container \"main\" adds capability SYS_ADMIN, with which it can get past gpufrac's "
      "limiter and limit file: it may not share a GPU (allow it with the namespace label "
      "gpufrac.io/allow-unenforced=true; it may have a whole GPU or a MIG instance)";
  json share = privileged("share", FractionLimits(250));
  json r = s.Filter(share, {"n1", "n2", "mig"});
  EXPECT_EQ(r["NodeNames"], json::array({"mig"})) << r.dump();
  EXPECT_EQ(r["FailedNodes"]["n1"], why);
  ASSERT_EQ(s.Bind(share, "mig"), "");
  std::optional<Assignment> a = AssignmentOf(Stored("share"));
  ASSERT_TRUE(a.has_value());
  EXPECT_TRUE(a->containers[0].gpus[0].mig.has_value()) << "a MIG instance, not a share";
  // The pod is told once, although kube-scheduler filters it again.
  s.Filter(share, {"n1"});
  int told = 0;
  for (const FakeClusterApi::Event& e : api_.events()) {
    if (e.reason != "GpufracNoSharedGpu") continue;
    ++told;
    EXPECT_TRUE(e.warning);
    EXPECT_EQ(e.pod, "default/share");
    EXPECT_THAT(e.message, HasSubstr("adds capability SYS_ADMIN, with which it can get past"));
  }
  EXPECT_EQ(told, 1);
  // A whole GPU is fine, shared GPU or not.
  EXPECT_EQ(s.Filter(privileged("whole", {{"gpufrac.io/gpu", "1"}}), {"n1", "n2"})["NodeNames"],
            json::array({"n1", "n2"}));
  // A bind to a node the filter refused is refused too.
  json other = privileged("other", FractionLimits(250));
  EXPECT_THAT(s.Bind(other, "n1"), HasSubstr("may not share a GPU"));

  // The namespace label allows it for that namespace only.
  api_.SetNamespaceLabel("ml", "gpufrac.io/allow-unenforced", "true");
  EXPECT_TRUE(s.Fits(privileged("allowed", FractionLimits(250), "ml"), "n1"));
  EXPECT_FALSE(s.Fits(privileged("still", FractionLimits(250)), "n1"));
  // So does the extender's option, everywhere.
  Scheduler lenient(api_, ExtenderOptions{.allow_unenforced = true});
  EXPECT_TRUE(lenient.Fits(privileged("anywhere", FractionLimits(250)), "n1"));
  // Pods that cannot remove their limits cost no namespace read.
  const int reads = api_.namespace_gets();
  EXPECT_TRUE(s.Fits(AddPod("plain", FractionLimits(250)), "n1"));
  EXPECT_EQ(api_.namespace_gets(), reads);
}

// Issue 29: pods the extender could not place (or that it could not answer while it was down)
// sit in kube-scheduler's unschedulable queue, which a node's new GPU inventory does not empty:
// the extender updates them (annotation gpufrac.io/retry) so that they are tried again at once.
TEST_F(ExtenderTest, WaitingPodsAreTriedAgainWhenTheBooksAreBuiltAndWhenANodesGpusChange) {
  json waiting = AddPod("waiting", FractionLimits(250));
  json plain = AddPod("plain", {{"cpu", "1"}});
  json bound = AddPod("bound", FractionLimits(250));
  bound["spec"]["nodeName"] = "n1";
  bound = api_.PutPod(bound);
  json volcano = testing::PodObject("volcano", FractionLimits(250));
  volcano["spec"]["schedulerName"] = "volcano";
  volcano = api_.PutPod(volcano);
  Scheduler s(api_);
  EXPECT_TRUE(s.extender->retry_wanted()) << "every node's inventory is new to a new extender";
  for (const json& p : api_.AllPods()) s.extender->OnPod(p);
  EXPECT_EQ(s.extender->RetryWaiting(std::chrono::seconds(30)), 1);
  EXPECT_FALSE(AnnotationOf(Stored("waiting"), kAnnotationRetry).empty()) << "waited through";
  EXPECT_TRUE(AnnotationOf(Stored("plain"), kAnnotationRetry).empty()) << "not gpufrac's";
  EXPECT_TRUE(AnnotationOf(Stored("bound"), kAnnotationRetry).empty()) << "not waiting";
  EXPECT_TRUE(AnnotationOf(Stored("volcano"), kAnnotationRetry).empty()) << "not served here";
  EXPECT_FALSE(s.extender->retry_wanted());
  // A scheduler is served once its pods come to be filtered.
  json other = testing::PodObject("other", FractionLimits(100));
  other["spec"]["schedulerName"] = "volcano";
  EXPECT_TRUE(s.Fits(api_.PutPod(other), "n1"));
  EXPECT_TRUE(s.extender->retry_wanted());
  EXPECT_EQ(s.extender->RetryWaiting(std::chrono::seconds(30)), 1);
  EXPECT_FALSE(AnnotationOf(Stored("volcano"), kAnnotationRetry).empty());

  // Tried again, kube-scheduler filters it; the whole-GPU node cannot hold it.
  s.extender->OnPod(Stored("waiting"));
  EXPECT_FALSE(s.Fits(Stored("waiting"), "n2"));
  // The same inventory again changes nothing; a changed one does.
  s.extender->OnNode(*api_.GetNode("n1"));
  EXPECT_FALSE(s.extender->retry_wanted());
  NodeInventory more = Inventory("n1", 2, "A100-80GB");
  s.extender->OnNode(api_.PutNode(NodeObject("n1", &more)));
  EXPECT_TRUE(s.extender->retry_wanted());
  // Not twice within the interval (its watch event has its new resourceVersion).
  EXPECT_EQ(s.extender->RetryWaiting(std::chrono::seconds(30)), 0);
  EXPECT_EQ(s.extender->RetryWaiting(std::chrono::milliseconds(0)), 1);
  // A pod that changed since the watch showed it is not written over.
  json stale = Stored("waiting");
  api_.PutPod(stale);
  EXPECT_EQ(s.extender->RetryWaiting(std::chrono::milliseconds(0)), 0);
  // A pod bound or deleted waits no more.
  s.extender->OnPodDeleted(Stored("waiting"));
  EXPECT_EQ(s.extender->RetryWaiting(std::chrono::milliseconds(0)), 0);
}

// Issue 29, a killed agent: while a node's agent pod is not Ready (the kubelet would fail every
// GPU pod it admits), the filter refuses the node to GPU pods with the reason and a bind there is
// refused; pods without GPUs are not concerned; once the agent pod is Ready again the node is
// open and the pods it turned away are tried again.
TEST_F(ExtenderTest, ANodeWhoseAgentPodIsNotReadyTakesNoGpuPod) {
  Scheduler s(api_);
  s.extender->RetryWaiting(std::chrono::seconds(30));  // Started: nothing waited through it.
  json agent = testing::AgentPodObject("n1", /*ready=*/false);
  agent["metadata"]["uid"] = "agent-n1";
  s.extender->OnPod(agent);
  json pod = AddPod("p", FractionLimits(250));
  json r = s.Filter(pod, {"n1"});
  EXPECT_EQ(r["NodeNames"], json::array()) << r.dump();
  EXPECT_EQ(r["FailedNodes"].value("n1", ""), std::string(kReasonAgentNotReady)) << r.dump();
  EXPECT_TRUE(s.Fits(AddPod("plain", {{"cpu", "1"}}), "n1")) << "a pod without GPUs";
  EXPECT_THAT(s.Bind(pod, "n1"), HasSubstr(std::string(kReasonAgentNotReady)));
  EXPECT_EQ(NodeNameOf(Stored("p")), "") << "not bound";
  EXPECT_FALSE(s.ledger->BookingOf("default/p").has_value()) << "nothing booked";
  s.extender->OnPod(Stored("p"));  // As the pod watch shows it, unbound.

  json ready = testing::AgentPodObject("n1", /*ready=*/true);
  ready["metadata"]["uid"] = "agent-n1";
  s.extender->OnPod(ready);
  EXPECT_TRUE(s.extender->retry_wanted());
  EXPECT_EQ(s.extender->RetryWaiting(std::chrono::milliseconds(0)), 1);
  EXPECT_FALSE(AnnotationOf(Stored("p"), kAnnotationRetry).empty()) << "tried again";
  EXPECT_TRUE(s.Fits(Stored("p"), "n1"));
  EXPECT_EQ(s.Bind(Stored("p"), "n1"), "");
}

// Issue 29 (L2): a node's new inventory must not make the extender write every unbound pod of
// the cluster. Only pods it refused, of a scheduler it serves, not held by scheduling gates.
TEST_F(ExtenderTest, OnlyPodsTheExtenderLeftWithoutANodeAreTriedAgain) {
  Scheduler s(api_);
  s.extender->RetryWaiting(std::chrono::seconds(30));  // Started: nothing waited through it.
  auto add = [&](const std::string& name, const std::string& scheduler, bool gated) {
    json pod = testing::PodObject(name, FractionLimits(250));
    pod["spec"]["schedulerName"] = scheduler;
    if (gated) pod["spec"]["schedulingGates"] = {{{"name", "example.com/quota"}}};
    pod = api_.PutPod(pod);
    s.extender->OnPod(pod);
    return pod;
  };
  json fits = add("fits", "default-scheduler", false);
  json refused = add("refused", "default-scheduler", false);
  json unseen = add("unseen", "default-scheduler", false);
  json other = add("other", "volcano", false);
  json gated = add("gated", "default-scheduler", true);
  json early = add("early", "default-scheduler", false);
  EXPECT_TRUE(s.Fits(fits, "n1"));
  EXPECT_FALSE(s.Fits(refused, "n2"));
  EXPECT_FALSE(s.Fits(gated, "n2"));
  // Asked while the books were being built: answered with an error, so refused.
  s.extender->FilterUnanswered(FilterByNames(early, {"n1"}));
  // Refused once, then fitting: not refused any more.
  json later = add("later", "default-scheduler", false);
  EXPECT_FALSE(s.Fits(later, "n2"));
  EXPECT_TRUE(s.Fits(later, "n1"));

  NodeInventory more = Inventory("n1", 2, "A100-80GB");
  s.extender->OnNode(api_.PutNode(NodeObject("n1", &more)));
  ASSERT_TRUE(s.extender->retry_wanted());
  EXPECT_EQ(s.extender->RetryWaiting(std::chrono::milliseconds(0)), 2);
  for (const char* name : {"refused", "early"}) {
    EXPECT_FALSE(AnnotationOf(Stored(name), kAnnotationRetry).empty()) << name;
  }
  for (const char* name : {"fits", "unseen", "other", "gated", "later"}) {
    EXPECT_TRUE(AnnotationOf(Stored(name), kAnnotationRetry).empty()) << name;
  }
  // The per-pod interval still holds.
  s.extender->OnPod(Stored("refused"));
  s.extender->OnPod(Stored("early"));
  EXPECT_EQ(s.extender->RetryWaiting(std::chrono::seconds(30)), 0);
}

TEST_F(ExtenderTest, BindOfAPodDeletedBeforeItsAssignmentIsWrittenLeavesNoBooking) {
  Scheduler s(api_);
  json pod = AddPod("p", FractionLimits(600));
  api_.DeletePodBeforeAnnotate("default", "p");
  EXPECT_NE(s.Bind(pod, "n1"), "");
  EXPECT_FALSE(s.ledger->BookingOf("default/p").has_value());
  EXPECT_EQ(s.ledger->booking_count(), 0u);
  EXPECT_EQ(api_.bind_calls(), 0);
  EXPECT_THAT(api_.PendingOn("n1"), IsEmpty()) << "no pending booking is left behind";
  EXPECT_TRUE(s.Fits(AddPod("q", FractionLimits(1000 - 1)), "n1"));
  EXPECT_EQ(s.extender->stats().bind_failures, 1u);
}

TEST_F(ExtenderTest, BindOfAPodDeletedBeforeTheBindingLeavesNoBooking) {
  Scheduler s(api_);
  json pod = AddPod("p", FractionLimits(600));
  api_.DeletePodBeforeBind("default", "p");
  EXPECT_NE(s.Bind(pod, "n1"), "");
  EXPECT_FALSE(s.ledger->BookingOf("default/p").has_value());
  EXPECT_FALSE(api_.Pod("default", "p").has_value());
  EXPECT_THAT(api_.PendingOn("n1"), IsEmpty()) << "no pending booking is left behind";
  EXPECT_TRUE(s.Fits(AddPod("q", FractionLimits(999)), "n1"));
}

TEST_F(ExtenderTest, BindOfAPodThatIsGoneOrWasRecreated) {
  Scheduler s(api_);
  json ghost = PodObject("ghost", FractionLimits(100));
  ghost["metadata"]["uid"] = "uid-ghost";
  EXPECT_THAT(s.Bind(ghost, "n1"), HasSubstr("not found"));

  json pod = AddPod("p", FractionLimits(600));
  json old = pod;
  old["metadata"]["uid"] = "uid-of-an-older-pod";
  EXPECT_NE(s.Bind(old, "n1"), "");
  EXPECT_EQ(NodeNameOf(Stored("p")), "");
  EXPECT_EQ(AssignmentText(Stored("p")), "");
  EXPECT_EQ(s.ledger->booking_count(), 0u);
}

TEST_F(ExtenderTest, BindFailureRemovesTheAssignment) {
  Scheduler s(api_);
  json pod = AddPod("p", FractionLimits(600));
  api_.FailNextBind(InternalError("etcdserver: request timed out"));
  std::string error = s.Bind(pod, "n1");
  EXPECT_THAT(error, HasSubstr("request timed out"));
  json stored = Stored("p");
  EXPECT_EQ(NodeNameOf(stored), "");
  EXPECT_EQ(AssignmentText(stored), "") << "no record of a booking that did not happen";
  EXPECT_EQ(s.ledger->booking_count(), 0u);
  EXPECT_THAT(api_.PendingOn("n1"), IsEmpty()) << "no pending booking is left behind";
  // The scheduler retries; this time it works.
  ASSERT_EQ(s.Bind(Stored("p"), "n1"), "");
  EXPECT_EQ(NodeNameOf(Stored("p")), "n1");
  EXPECT_NE(AssignmentText(Stored("p")), "");
}

TEST_F(ExtenderTest, BindRereadsThePodWhenItChangedUnderIt) {
  // The pod's resourceVersion moved between the read and the write (its status, a label): the
  // assignment is written again on what is there now, and the bind goes through.
  Scheduler s(api_);
  json pod = AddPod("p", FractionLimits(600));
  api_.ConflictOnNextAnnotate();
  EXPECT_EQ(s.Bind(pod, "n1"), "");
  EXPECT_EQ(NodeNameOf(Stored("p")), "n1");
  EXPECT_NE(AssignmentText(Stored("p")), "");
  EXPECT_EQ(api_.bind_calls(), 1);
  EXPECT_EQ(s.ledger->booking_count(), 1u);
}

TEST_F(ExtenderTest, BindToANodeThatIsGone) {
  Scheduler s(api_);
  json pod = AddPod("p", FractionLimits(600));
  api_.DeleteNode("n1");  // The extender's watch has not caught up.
  EXPECT_NE(s.Bind(pod, "n1"), "");
  EXPECT_EQ(NodeNameOf(Stored("p")), "");
  EXPECT_EQ(AssignmentText(Stored("p")), "");
  EXPECT_EQ(s.ledger->booking_count(), 0u);
}

TEST_F(ExtenderTest, BindWhereThePodNoLongerFits) {
  Scheduler s(api_);
  ASSERT_EQ(s.Bind(AddPod("a", FractionLimits(700)), "n1"), "");
  std::string error = s.Bind(AddPod("b", FractionLimits(700)), "n1");
  EXPECT_THAT(error, HasSubstr("n1"));
  EXPECT_EQ(NodeNameOf(Stored("b")), "");
  EXPECT_EQ(AssignmentText(Stored("b")), "");
  EXPECT_FALSE(s.ledger->BookingOf("default/b").has_value());
}

// kube-scheduler retries a bind whose answer it did not get, though the pod was bound. The
// assignment the node agent has already given the container must stay the pod's record:
// rewriting it to other GPUs would make the books disagree with what the pod holds.
TEST_F(ExtenderTest, ARetriedBindKeepsTheAssignmentOfTheBoundPod) {
  NodeInventory n3 = Inventory("n3", 2, "A100-80GB");
  api_.PutNode(NodeObject("n3", &n3));
  Scheduler s(api_);
  json pod = AddPod("p", FractionLimits(600));
  ASSERT_EQ(s.Bind(pod, "n3"), "");
  StatusOr<Assignment> first = AssignmentFromJson(json::parse(AssignmentText(Stored("p"))));
  ASSERT_TRUE(first.ok()) << first.status();

  s.Bind(Stored("p"), "n3");  // Succeeding (idempotent) or failing are both acceptable answers.
  StatusOr<Assignment> now = AssignmentFromJson(json::parse(AssignmentText(Stored("p"))));
  ASSERT_TRUE(now.ok()) << now.status();
  EXPECT_EQ(AssignmentToJson(*now)["containers"], AssignmentToJson(*first)["containers"])
      << "the bound pod's assignment was rewritten";
  EXPECT_EQ(NodeNameOf(Stored("p")), "n3");

  // And the books, as the watch then reports the pod, still have p on its original GPU.
  s.extender->OnPod(Stored("p"));
  const int gpu = first->containers[0].gpus[0].index;
  json other = AddPod("q", FractionLimits(600));
  ASSERT_EQ(s.Bind(other, "n3"), "");
  StatusOr<Assignment> q = AssignmentFromJson(json::parse(AssignmentText(Stored("q"))));
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_NE(q->containers[0].gpus[0].index, gpu) << "p and q would share 1.2 of one GPU";
}

// ---- Two extenders, one API server ----

// B has not seen A's binding through its watch; it re-reads the node's pods and refuses.
TEST_F(ExtenderTest, SecondExtenderSeesTheFirstsBindingOnTheNode) {
  Scheduler a(api_, {.holder = "extender-a"});
  Scheduler b(api_, {.holder = "extender-b"});
  json p = AddPod("p", FractionLimits(600));
  json q = AddPod("q", FractionLimits(600));
  EXPECT_TRUE(b.Fits(q, "n1")) << "B's books are stale, so its filter lets q through";
  ASSERT_EQ(a.Bind(p, "n1"), "");
  EXPECT_NE(b.Bind(q, "n1"), "");
  EXPECT_EQ(NodeNameOf(Stored("q")), "");
  EXPECT_EQ(AssignmentText(Stored("q")), "");
  EXPECT_TRUE(b.ledger->BookingOf("default/p").has_value()) << "B learnt of p from the node";
  EXPECT_FALSE(b.ledger->BookingOf("default/q").has_value());
  EXPECT_THAT(b.ledger->Overbooked(), IsEmpty());
}

// B binds while A is between its pending booking and its binding: A's pod is not bound yet, but
// its pending booking counts, and B refuses at once.
TEST_F(ExtenderTest, SecondExtenderCountsTheFirstsPendingBooking) {
  Scheduler a(api_, {.holder = "extender-a"});
  Scheduler b(api_, {.holder = "extender-b"});
  json p = AddPod("p", FractionLimits(600));
  json q = AddPod("q", FractionLimits(600));
  std::string b_error = "<not run>";
  api_.BeforeNextBind([&] { b_error = b.Bind(q, "n1"); });
  ASSERT_EQ(a.Bind(p, "n1"), "");
  EXPECT_THAT(b_error, HasSubstr("n1"));
  EXPECT_EQ(NodeNameOf(Stored("p")), "n1");
  EXPECT_EQ(NodeNameOf(Stored("q")), "");
  EXPECT_EQ(AssignmentText(Stored("q")), "");
}

// B's whole bind happens between A's read of the node and A's write of its pending bookings: A's
// write fails on the node's resourceVersion, and A chooses again on what B booked.
TEST_F(ExtenderTest, AConflictingWriteIsChosenAgainOnTheOthersBooking) {
  Scheduler a(api_, {.holder = "extender-a"});
  Scheduler b(api_, {.holder = "extender-b"});
  json p = AddPod("p", FractionLimits(400));
  json q = AddPod("q", FractionLimits(600));
  std::string b_error = "<not run>";
  api_.BeforeNextAnnotateNode([&] { b_error = b.Bind(q, "n1"); });
  ASSERT_EQ(a.Bind(p, "n1"), "");
  EXPECT_EQ(b_error, "");
  EXPECT_EQ(a.extender->stats().pending_conflicts, 1u);
  EXPECT_EQ(NodeNameOf(Stored("p")), "n1");
  EXPECT_EQ(NodeNameOf(Stored("q")), "n1");
  EXPECT_THAT(a.ledger->Overbooked(), IsEmpty());
  EXPECT_THAT(a.Bind(AddPod("r", FractionLimits(1)), "n1"), HasSubstr("n1")) << "400 + 600 is full";
}

// Binds to one node that arrive while the extender writes it wait, and are then chosen in turn
// and written together: one write of the node for all of them, and never more than fits.
TEST_F(ExtenderTest, BindsThatWaitForTheNodeAreWrittenTogether) {
  Scheduler s(api_);
  std::vector<json> pods;
  for (int i = 0; i < 5; ++i) pods.push_back(AddPod("p" + std::to_string(i), FractionLimits(300)));
  std::vector<std::string> errors(5, "<not run>");
  std::vector<std::thread> waiting;
  api_.BeforeNextAnnotateNode([&] {
    for (int i = 1; i < 5; ++i) {
      waiting.emplace_back([&, i] { errors[i] = s.Bind(pods[i], "n1"); });
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // They queue up.
  });
  errors[0] = s.Bind(pods[0], "n1");
  for (std::thread& t : waiting) t.join();
  EXPECT_EQ(api_.annotate_node_calls(), 2) << "p0's write, then one for p1 to p4";
  int bound = 0;
  for (int i = 0; i < 5; ++i) {
    bound += errors[i].empty();
    EXPECT_EQ(errors[i].empty(), NodeNameOf(Stored("p" + std::to_string(i))) == "n1") << i;
  }
  EXPECT_EQ(bound, 3) << "3 x 300 of the GPU fit, a fourth does not";
  EXPECT_THAT(s.ledger->Overbooked(), IsEmpty());
}

// A pending booking stops counting once its pod is bound (its own record counts), its pod is
// deleted, or it expires; the next write leaves it out. A live one of a pod not bound counts.
TEST_F(ExtenderTest, PendingBookingsCountUntilTheirPodIsBoundDeletedOrTheyExpire) {
  Scheduler s(api_);
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  auto booking = [&](const std::string& pod, const std::string& uid, int64_t expires_ms) {
    Assignment a;
    a.node = "n1";
    a.time_ms = now_ms;
    a.containers.push_back({.container = "main",
                            .gpus = {{.index = 0,
                                      .uuid = "GPU-n1-0",
                                      .milli = 900,
                                      .memory_bytes = 1,
                                      .mig = std::nullopt}}});
    return PendingBooking{
        .id = "other/" + uid, .pod = pod, .uid = uid, .expires_ms = expires_ms, .assignment = a};
  };
  auto set_pending = [&](const std::vector<PendingBooking>& bookings) {
    json node = api_.GetNode("n1").value();
    ASSERT_TRUE(
        api_.AnnotateNode("n1", MetaOf(node, "resourceVersion"),
                          {{std::string(kAnnotationPending), PendingBookingsValue(bookings)}})
            .ok());
  };

  // Live, for a pod not bound: 900 of the GPU are taken.
  set_pending({booking("default/x", "uid-x", now_ms + 60000)});
  EXPECT_THAT(s.Bind(AddPod("p", FractionLimits(200)), "n1"), HasSubstr("n1"));
  // Expired: it counts no more, and the write leaves it out.
  set_pending({booking("default/x", "uid-x", now_ms - 1)});
  ASSERT_EQ(s.Bind(Stored("p"), "n1"), "");
  std::vector<PendingBooking> pending = api_.PendingOn("n1");
  ASSERT_EQ(pending.size(), 1u);
  EXPECT_EQ(pending[0].pod, "default/p");
  // p is bound: the next write leaves its pending booking out, and p counts through its record.
  ASSERT_EQ(s.Bind(AddPod("q", FractionLimits(100)), "n1"), "");
  pending = api_.PendingOn("n1");
  ASSERT_EQ(pending.size(), 1u);
  EXPECT_EQ(pending[0].pod, "default/q");
  EXPECT_THAT(s.Bind(AddPod("r", FractionLimits(800)), "n1"), HasSubstr("n1"));
  // A deleted pod's pending booking (the watch told of the deletion) counts no more.
  json y = AddPod("y", FractionLimits(900));
  set_pending({booking("default/y", MetaOf(y, "uid"), now_ms + 60000)});
  EXPECT_THAT(s.Bind(AddPod("t", FractionLimits(10)), "n1"), HasSubstr("n1"));
  s.extender->OnPodDeleted(y);
  ASSERT_EQ(s.Bind(Stored("t"), "n1"), "");
  EXPECT_THAT(s.ledger->Overbooked(), IsEmpty());
}

TEST(ExtenderRaceTest, TwoExtendersRacingForOneGpuNeverBothWin) {
  for (int round = 0; round < 25; ++round) {
    FakeClusterApi api;
    NodeInventory inv = Inventory("n1", 1, "A100-80GB");
    api.PutNode(NodeObject("n1", &inv));
    Scheduler a(api, {.holder = "extender-a"});
    Scheduler b(api, {.holder = "extender-b"});
    json p = api.PutPod(PodObject("p", FractionLimits(600)));
    json q = api.PutPod(PodObject("q", FractionLimits(600)));
    std::string a_error, b_error;
    std::latch start(2);
    std::thread ta([&] {
      start.arrive_and_wait();
      a_error = a.Bind(p, "n1");
    });
    std::thread tb([&] {
      start.arrive_and_wait();
      b_error = b.Bind(q, "n1");
    });
    ta.join();
    tb.join();
    EXPECT_EQ(a_error.empty() + b_error.empty(), 1)
        << "round " << round << ": a \"" << a_error << "\", b \"" << b_error << "\"";
    int bound = 0, annotated = 0;
    for (const json& pod : api.AllPods()) {
      bound += !pod["spec"].value("nodeName", "").empty();
      annotated += pod["metadata"].contains("annotations") &&
                   pod["metadata"]["annotations"].contains(std::string(kAnnotationAssignment));
    }
    EXPECT_EQ(bound, 1) << "round " << round;
    EXPECT_EQ(annotated, 1) << "round " << round;
  }
}

// ---- Restart, an earlier version's lock, finished pods ----

TEST_F(ExtenderTest, ARestartedExtenderRebuildsTheSameBooksFromTheWatches) {
  NodeInventory n3 = Inventory("n3", 4, "H100-80GB");
  api_.PutNode(NodeObject("n3", &n3));
  Scheduler before(api_);
  ASSERT_EQ(before.Bind(AddPod("a", FractionLimits(300)), "n1"), "");
  ASSERT_EQ(before.Bind(AddPod("b", {{"gpufrac.io/gpu", "2"}}), "n3"), "");
  ASSERT_EQ(
      before.Bind(AddPod("c", {{"gpufrac.io/gpu", "1"}, {"gpufrac.io/gpu-memory", "20480"}}), "n3"),
      "");
  ASSERT_EQ(before.Bind(AddPod("d", {{"gpufrac.io/gpu", "1"}}), "n2"), "");
  AddPod("pending", FractionLimits(100));  // Not bound: holds nothing.

  // Pods first, then nodes (bookings on nodes that appear later count), as a watch may deliver.
  auto ledger = std::move(*Ledger::Create());
  Extender after(ledger.get(), &api_);
  for (const json& pod : api_.AllPods()) after.OnPod(pod);
  for (const json& node : api_.AllNodes()) after.OnNode(node);

  EXPECT_EQ(ledger->booking_count(), before.ledger->booking_count());
  for (const char* pod : {"default/a", "default/b", "default/c", "default/d"}) {
    ASSERT_TRUE(ledger->BookingOf(pod).has_value()) << pod;
    EXPECT_EQ(*ledger->BookingOf(pod), *before.ledger->BookingOf(pod)) << pod;
  }
  EXPECT_FALSE(ledger->BookingOf("default/pending").has_value());
  for (const json& probe :
       {PodObject("x", FractionLimits(700)), PodObject("y", FractionLimits(701)),
        PodObject("z", {{"gpufrac.io/gpu", "2"}}), PodObject("w", {{"gpufrac.io/gpu", "1"}})}) {
    std::string body = FilterByNames(probe, {"n1", "n2", "n3", "cpu"});
    EXPECT_EQ(json::parse(after.Filter(body))["NodeNames"],
              json::parse(before.extender->Filter(body))["NodeNames"])
        << probe["metadata"]["name"];
  }
  EXPECT_EQ(json::parse(after.Filter(
                FilterByNames(PodObject("x", FractionLimits(700)), {"n1"})))["NodeNames"],
            json::array({"n1"}));
  EXPECT_EQ(json::parse(after.Filter(
                FilterByNames(PodObject("y", FractionLimits(701)), {"n1"})))["NodeNames"],
            json::array());
}

// Earlier versions took a node lock (annotation gpufrac.io/lock) for each bind: a live one is
// waited for, and an expired one is removed with the first write of the pending bookings.
TEST_F(ExtenderTest, ALockOfAnEarlierVersionIsWaitedForAndRemovedOnceExpired) {
  Scheduler s(api_, {.holder = "extender-a", .node_wait = std::chrono::milliseconds(60)});
  const int64_t now_s = std::chrono::duration_cast<std::chrono::seconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
  json locked = NodeObject("n1", &n1_);
  locked["metadata"]["annotations"][std::string(kAnnotationLegacyLock)] =
      "old-extender/uid-1 " + std::to_string(now_s + 30);
  api_.PutNode(locked);
  json pod = AddPod("p", FractionLimits(500));
  EXPECT_THAT(s.Bind(pod, "n1"), HasSubstr("locked by old-extender/uid-1"));
  EXPECT_EQ(NodeNameOf(Stored("p")), "");
  EXPECT_EQ(AssignmentText(Stored("p")), "");

  locked["metadata"]["annotations"][std::string(kAnnotationLegacyLock)] =
      "old-extender/uid-1 " + std::to_string(now_s - 1);
  api_.PutNode(locked);
  ASSERT_EQ(s.Bind(Stored("p"), "n1"), "");
  EXPECT_EQ(NodeNameOf(Stored("p")), "n1");
  EXPECT_EQ(AnnotationOf(api_.GetNode("n1").value(), kAnnotationLegacyLock), "");
}

TEST_F(ExtenderTest, AFinishedPodFreesItsBooking) {
  Scheduler s(api_);
  ASSERT_EQ(s.Bind(AddPod("job", {{"gpufrac.io/gpu", "1"}}), "n1"), "");
  json next = AddPod("next", FractionLimits(500));
  EXPECT_FALSE(s.Fits(next, "n1"));
  s.extender->OnPod(api_.SetPodPhase("default", "job", "Succeeded"));
  EXPECT_FALSE(s.ledger->BookingOf("default/job").has_value());
  EXPECT_TRUE(s.Fits(next, "n1"));

  ASSERT_EQ(s.Bind(next, "n1"), "");
  EXPECT_FALSE(s.Fits(AddPod("more", FractionLimits(600)), "n1"));
  s.extender->OnPodDeleted(Stored("next"));
  EXPECT_TRUE(s.Fits(Stored("more"), "n1"));
}

TEST_F(ExtenderTest, NodeWatchAddsAndRemovesNodes) {
  Scheduler s(api_);
  json pod = AddPod("p", FractionLimits(500));
  NodeInventory n5 = Inventory("n5", 1, "L4");
  EXPECT_FALSE(s.Fits(pod, "n5"));
  s.extender->OnNode(NodeObject("n5", &n5));
  EXPECT_TRUE(s.Fits(pod, "n5"));
  // The agent stopped publishing: the node is no longer offered.
  s.extender->OnNode(NodeObject("n5", nullptr));
  EXPECT_FALSE(s.Fits(pod, "n5"));
  // A malformed inventory is ignored (logged), not a crash.
  json broken = NodeObject("n5", nullptr);
  broken["metadata"]["annotations"] = {{std::string(kAnnotationInventory), "{\"version\": 7}"}};
  s.extender->OnNode(broken);
  EXPECT_FALSE(s.Fits(pod, "n5"));
  s.extender->OnNode(NodeObject("n5", &n5));
  EXPECT_TRUE(s.Fits(pod, "n5"));
  s.extender->OnNodeDeleted(NodeObject("n5", &n5));
  EXPECT_FALSE(s.Fits(pod, "n5"));
}

// A pod whose assignment names another node than the one it is bound to holds nothing there.
TEST_F(ExtenderTest, OnPodCountsOnlyAssignmentsOfTheBoundNode) {
  Scheduler s(api_);
  json pod = AddPod("p", FractionLimits(500));
  ASSERT_EQ(s.Bind(pod, "n1"), "");
  json moved = Stored("p");
  moved["spec"]["nodeName"] = "n2";
  s.extender->OnPod(moved);
  EXPECT_FALSE(s.ledger->BookingOf("default/p").has_value());
  s.extender->OnPod(Stored("p"));
  EXPECT_TRUE(s.ledger->BookingOf("default/p").has_value());
}

}  // namespace
}  // namespace gpufrac::k8s

namespace gpufrac::k8s {
namespace {

TEST_F(ExtenderTest, YieldsToAnotherExtenderBindingThePodElsewhere) {
  // kube-scheduler gave up waiting on one bind (to n2) and tried again on n1 while the first is
  // still running: the pod carries a fresh assignment for n2 and is unbound. The second bind
  // must not write over it.
  Scheduler s(api_);
  Assignment elsewhere;
  elsewhere.node = "n2";
  elsewhere.time_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  elsewhere.containers.push_back(
      {.container = "main",
       .gpus =
           {{.index = 0, .uuid = "GPU-x", .milli = 600, .memory_bytes = 1, .mig = std::nullopt}},
       .device_plugin = true});
  json pod = AddPod("p", FractionLimits(600),
                    {{std::string(kAnnotationAssignment), AssignmentToJson(elsewhere).dump()}});
  std::string error = s.Bind(pod, "n1");
  EXPECT_NE(error.find("another extender"), std::string::npos) << error;
  EXPECT_EQ(NodeNameOf(Stored("p")), "");
  EXPECT_EQ(AssignmentFromJson(json::parse(AssignmentText(Stored("p"))))->node, "n2");
  // A stale record (a bind that died long ago) does not block it.
  elsewhere.time_ms -= 3600 * 1000;
  pod = AddPod("q", FractionLimits(600),
               {{std::string(kAnnotationAssignment), AssignmentToJson(elsewhere).dump()}});
  EXPECT_EQ(s.Bind(pod, "n1"), "");
}

TEST_F(ExtenderTest, LateEventsNeitherUndoABindNorBookADeletedPod) {
  Scheduler s(api_);
  json pod = AddPod("p", FractionLimits(600));
  ASSERT_EQ(s.Bind(pod, "n1"), "");
  ASSERT_EQ(s.ledger->booking_count(), 1u);
  // The watch delivers the pod as it was between the assignment and the binding.
  json between = Stored("p");
  between["spec"].erase("nodeName");
  s.extender->OnPod(between);
  EXPECT_EQ(s.ledger->booking_count(), 1u) << "an event from before the binding undid it";
  // Deleted; then an older event arrives: it stays unbooked.
  json bound = Stored("p");
  s.extender->OnPodDeleted(bound);
  EXPECT_EQ(s.ledger->booking_count(), 0u);
  s.extender->OnPod(bound);
  EXPECT_EQ(s.ledger->booking_count(), 0u) << "a late event booked a deleted pod";
}

}  // namespace
}  // namespace gpufrac::k8s
