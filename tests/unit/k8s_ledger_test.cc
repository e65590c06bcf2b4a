// The scheduler extender's books: the inventory and assignment documents (round trips, malformed
// ones refused naming the field), and the Ledger's decisions on shared, whole-only, unhealthy and
// MIG GPUs, its bookings (nodes that appear later, overbooking, removal), and a 400-GPU scenario.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/units.h"
#include "gpu/catalogue.h"
#include "gpu/mig_catalogue.h"
#include "k8s/assignment.h"
#include "k8s/inventory.h"
#include "k8s/ledger.h"
#include "k8s/pod_request.h"

namespace gpufrac::k8s {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;

uint64_t ModelMemory(const std::string& model) {
  const gpu::GpuModel* m = gpu::FindModel(model);
  EXPECT_NE(m, nullptr) << model;
  return m == nullptr ? 0 : m->memory_bytes;
}

GpuInfo Gpu(const std::string& node, int index, const std::string& model, GpuMode mode,
            bool healthy = true) {
  GpuInfo g;
  g.index = index;
  g.uuid = "GPU-" + node + "-" + std::to_string(index);
  g.model = model;
  g.memory_bytes = ModelMemory(model);
  g.mode = mode;
  g.healthy = healthy;
  return g;
}

NodeInventory Inventory(const std::string& node, int count, const std::string& model,
                        GpuMode mode = GpuMode::kShared) {
  NodeInventory inv;
  inv.slots_per_gpu = 16;
  for (int i = 0; i < count; ++i) inv.gpus.push_back(Gpu(node, i, model, mode));
  return inv;
}

ContainerRequest Container(GpuRequest request, const std::string& name = "main") {
  return {.container = name, .request = std::move(request)};
}
ContainerRequest Whole(uint32_t gpus, const std::string& name = "main") {
  return Container(GpuRequest::Whole(gpus), name);
}
ContainerRequest Fraction(uint32_t milli, const std::string& name = "main") {
  return Container(GpuRequest::Fraction(milli), name);
}
ContainerRequest Memory(uint64_t bytes, const std::string& name = "main") {
  return Container(GpuRequest::Memory(bytes), name);
}
ContainerRequest Mig(const std::string& profile, const std::string& name = "main") {
  return Container(GpuRequest::Mig(profile), name);
}
PodRequest Pod(std::vector<ContainerRequest> containers) {
  return PodRequest{std::move(containers)};
}

std::unique_ptr<Ledger> NewLedger() {
  StatusOr<std::unique_ptr<Ledger>> l = Ledger::Create();
  EXPECT_TRUE(l.ok()) << l.status();
  return std::move(*l);
}

Ledger::Verdict EvaluateOne(Ledger& ledger, const PodRequest& request, const std::string& node) {
  std::vector<Ledger::Verdict> v = ledger.Evaluate(request, {node});
  EXPECT_EQ(v.size(), 1u);
  return v.empty() ? Ledger::Verdict{} : v[0];
}

bool Fits(Ledger& ledger, const PodRequest& request, const std::string& node) {
  return EvaluateOne(ledger, request, node).fits;
}

// Chooses and books; returns the assignment (fails the test when it does not fit).
Assignment Place(Ledger& ledger, const std::string& pod, const PodRequest& request,
                 const std::string& node) {
  StatusOr<Assignment> a = ledger.Choose(request, node);
  EXPECT_TRUE(a.ok()) << a.status();
  if (!a.ok()) return {};
  ledger.Book(pod, *a);
  return *a;
}

Assignment OneGrant(const std::string& node, int index, uint32_t milli, uint64_t memory,
                    const std::string& container = "main") {
  GpuGrant g;
  g.index = index;
  g.uuid = "GPU-" + node + "-" + std::to_string(index);
  g.milli = milli;
  g.memory_bytes = memory;
  ContainerAssignment c;
  c.container = container;
  c.gpus.push_back(g);
  Assignment a;
  a.node = node;
  a.time_ms = 1700000000000;
  a.containers.push_back(c);
  return a;
}

const gpu::MigProfile& Profile(const std::string& model, const std::string& name) {
  const gpu::MigModel* m = gpu::FindMigModel(model);
  EXPECT_NE(m, nullptr) << model;
  const gpu::MigProfile* p = m ? gpu::FindMigProfile(*m, name) : nullptr;
  EXPECT_NE(p, nullptr) << name;
  static const gpu::MigProfile kNone{};
  return p ? *p : kNone;
}

bool LegalStart(const gpu::MigProfile& p, int start) {
  for (int i = 0; i < p.start_count; ++i) {
    if (p.starts[i].start == start) return true;
  }
  return false;
}

// ---- The inventory document ----

NodeInventory MixedInventory() {
  NodeInventory inv;
  inv.slots_per_gpu = 8;
  inv.gpus.push_back(Gpu("n", 0, "A100-80GB", GpuMode::kShared));
  inv.gpus.push_back(Gpu("n", 1, "A100-80GB", GpuMode::kWhole));
  inv.gpus.push_back(Gpu("n", 2, "H100-80GB", GpuMode::kShared, /*healthy=*/false));
  GpuInfo mig = Gpu("n", 3, "H100-80GB", GpuMode::kMig);
  mig.mig.push_back({.profile = "3g.40gb", .start = 0, .size = 4, .uuid = "MIG-a", .pod = "ns/p"});
  mig.mig.push_back({.profile = "1g.10gb", .start = 6, .size = 1, .uuid = "MIG-b", .pod = ""});
  inv.gpus.push_back(mig);
  return inv;
}

TEST(InventoryTest, RoundTrip) {
  NodeInventory inv = MixedInventory();
  json doc = InventoryToJson(inv);
  EXPECT_EQ(doc["version"], 1);
  EXPECT_EQ(doc["slots_per_gpu"], 8);
  ASSERT_EQ(doc["gpus"].size(), 4u);
  EXPECT_EQ(doc["gpus"][1]["mode"], "whole");
  EXPECT_EQ(doc["gpus"][2]["healthy"], false);
  EXPECT_EQ(doc["gpus"][3]["mode"], "mig");
  EXPECT_EQ(doc["gpus"][3]["mig"][0]["pod"], "ns/p");
  EXPECT_FALSE(doc["gpus"][3]["mig"][1].contains("pod")) << "idle instances have no pod";

  StatusOr<NodeInventory> direct = InventoryFromJson(doc);
  ASSERT_TRUE(direct.ok()) << direct.status();
  EXPECT_EQ(*direct, inv);
  // As the annotation carries it: text.
  StatusOr<NodeInventory> text = InventoryFromJson(json::parse(doc.dump()));
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, inv);
}

// The agent's --gpu-compute-policy, by which the extender decides the pairs; an agent before the
// field publishes none.
TEST(InventoryTest, TheComputePolicyIsKeptWhenPublished) {
  NodeInventory inv = MixedInventory();
  EXPECT_FALSE(InventoryToJson(inv).contains("compute_policy"));
  EXPECT_EQ(InventoryFromJson(InventoryToJson(inv))->compute_policy, std::nullopt);
  inv.compute_policy = ComputePolicy::kStrict;
  json doc = InventoryToJson(inv);
  EXPECT_EQ(doc["compute_policy"], "strict");
  StatusOr<NodeInventory> back = InventoryFromJson(json::parse(doc.dump()));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, inv);
  doc["compute_policy"] = "nice";
  EXPECT_THAT(InventoryFromJson(doc).status().message(),
              HasSubstr("gpufrac.io/gpus.compute_policy is \"nice\""));
}

TEST(InventoryTest, GpusComeBackInIndexOrderAndHealthyDefaultsToTrue) {
  json doc = json::parse(R"({"version": 1, "slots_per_gpu": 4, "gpus": [
      {"index": 1, "uuid": "GPU-b", "model": "L4", "memory_bytes": 100, "mode": "shared"},
      {"index": 0, "uuid": "GPU-a", "model": "L4", "memory_bytes": 100, "mode": "whole"}]})");
  StatusOr<NodeInventory> inv = InventoryFromJson(doc);
  ASSERT_TRUE(inv.ok()) << inv.status();
  ASSERT_EQ(inv->gpus.size(), 2u);
  EXPECT_EQ(inv->gpus[0].uuid, "GPU-a");
  EXPECT_EQ(inv->gpus[0].mode, GpuMode::kWhole);
  EXPECT_EQ(inv->gpus[1].uuid, "GPU-b");
  EXPECT_TRUE(inv->gpus[0].healthy);
}

TEST(InventoryTest, MalformedDocumentsNameTheField) {
  const json good = InventoryToJson(MixedInventory());
  struct Case {
    std::string what;
    std::function<void(json&)> spoil;
    std::string field;
  };
  const std::vector<Case> cases = {
      {"no version", [](json& d) { d.erase("version"); }, "gpufrac.io/gpus.version"},
      {"version 2", [](json& d) { d["version"] = 2; }, "gpufrac.io/gpus.version"},
      {"no slots", [](json& d) { d.erase("slots_per_gpu"); }, "slots_per_gpu"},
      {"gpus not a list", [](json& d) { d["gpus"] = "four"; }, "gpufrac.io/gpus.gpus"},
      {"no uuid", [](json& d) { d["gpus"][0].erase("uuid"); }, "gpus[0].uuid"},
      {"unknown mode", [](json& d) { d["gpus"][1]["mode"] = "fast"; }, "gpus[1].mode"},
      {"negative memory", [](json& d) { d["gpus"][0]["memory_bytes"] = -1; },
       "gpus[0].memory_bytes"},
      {"index as text", [](json& d) { d["gpus"][0]["index"] = "0"; }, "gpus[0].index"},
      {"duplicate index", [](json& d) { d["gpus"][1]["index"] = 0; }, "gpus[1].index"},
      {"negative index", [](json& d) { d["gpus"][0]["index"] = -3; }, "gpus[0].index"},
      {"healthy as text", [](json& d) { d["gpus"][0]["healthy"] = "yes"; }, "gpus[0].healthy"},
      {"gpu not an object", [](json& d) { d["gpus"][2] = 7; }, "gpus[2]"},
      {"mig start negative", [](json& d) { d["gpus"][3]["mig"][0]["start"] = -1; },
       "gpus[3].mig[0]"},
      {"mig size zero", [](json& d) { d["gpus"][3]["mig"][1]["size"] = 0; }, "gpus[3].mig[1]"},
      {"mig without profile", [](json& d) { d["gpus"][3]["mig"][0].erase("profile"); },
       "gpus[3].mig[0].profile"},
      {"mig pod a number", [](json& d) { d["gpus"][3]["mig"][0]["pod"] = 5; },
       "gpus[3].mig[0].pod"},
      {"mig an object",
       [](json& d) {
         d["gpus"][3]["mig"] = {{"0", {{"profile", "1g.10gb"}}}};
       },
       "gpus[3].mig"},
  };
  for (const Case& c : cases) {
    json doc = good;
    c.spoil(doc);
    StatusOr<NodeInventory> inv = NodeInventory{};
    EXPECT_NO_THROW(inv = InventoryFromJson(doc)) << c.what;
    EXPECT_FALSE(inv.ok()) << c.what;
    if (inv.ok()) continue;
    EXPECT_EQ(inv.status().code(), StatusCode::kInvalidArgument) << c.what;
    EXPECT_THAT(inv.status().message(), HasSubstr(c.field)) << c.what;
  }
  // Not an object at all, or not JSON (the annotation's text did not parse).
  EXPECT_FALSE(InventoryFromJson(json::array()).ok());
  EXPECT_FALSE(InventoryFromJson(json::parse("{", nullptr, false)).ok());
}

// ---- The assignment document ----

Assignment MixedAssignment() {
  Assignment a;
  a.node = "n1";
  a.time_ms = 1712345678901;
  a.containers.push_back({.container = "train",
                          .gpus = {{.index = 0,
                                    .uuid = "GPU-0",
                                    .milli = 1000,
                                    .memory_bytes = 80 * kGiB,
                                    .mig = std::nullopt},
                                   {.index = 3,
                                    .uuid = "GPU-3",
                                    .milli = 1000,
                                    .memory_bytes = 80 * kGiB,
                                    .mig = std::nullopt}}});
  a.containers.push_back(
      {.container = "infer",
       .gpus = {{.index = 5,
                 .uuid = "GPU-5",
                 .milli = 250,
                 .memory_bytes = 20 * kGiB,
                 .mig = MigGrant{.profile = "2g.20gb", .start = 4, .size = 2}}}});
  return a;
}

TEST(AssignmentTest, RoundTrip) {
  Assignment a = MixedAssignment();
  json doc = AssignmentToJson(a);
  EXPECT_EQ(doc["version"], 1);
  EXPECT_EQ(doc["node"], "n1");
  EXPECT_EQ(doc["containers"][0]["name"], "train");
  EXPECT_EQ(doc["containers"][1]["gpus"][0]["mig"]["profile"], "2g.20gb");
  EXPECT_FALSE(doc["containers"][0]["gpus"][0].contains("mig"));
  StatusOr<Assignment> direct = AssignmentFromJson(doc);
  ASSERT_TRUE(direct.ok()) << direct.status();
  EXPECT_EQ(*direct, a);
  StatusOr<Assignment> text = AssignmentFromJson(json::parse(doc.dump()));
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, a);
}

TEST(AssignmentTest, AComputeLimitIsKeptOnlyWhenGiven) {
  Assignment a = MixedAssignment();
  a.containers[0].compute_limit_milli = 700;
  json doc = AssignmentToJson(a);
  EXPECT_EQ(doc["containers"][0]["compute_limit_milli"], 700);
  EXPECT_FALSE(doc["containers"][1].contains("compute_limit_milli"))
      << "an assignment from before compute shares reads the same";
  StatusOr<Assignment> back = AssignmentFromJson(json::parse(doc.dump()));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, a);
  // 0 is not "none asked" (that is its absence): it is refused like any number out of range.
  for (int limit : {0, 1001}) {
    doc["containers"][0]["compute_limit_milli"] = limit;
    // As the annotation's text parses: the numbers unsigned.
    StatusOr<Assignment> bad = AssignmentFromJson(json::parse(doc.dump()));
    ASSERT_FALSE(bad.ok()) << limit;
    EXPECT_THAT(bad.status().message(), HasSubstr("containers[0].compute_limit_milli is"))
        << limit;
  }
}

// The pairs the extender decided, and the node's policy it decided them by; an assignment of
// an extender before them has neither (the agent then decides).
TEST(AssignmentTest, ComputePairsAndTheirPolicyAreKeptWhenDecided) {
  Assignment a = MixedAssignment();
  json old = AssignmentToJson(a);
  EXPECT_FALSE(old.contains("compute_policy"));
  EXPECT_FALSE(old["containers"][1]["gpus"][0].contains("compute"));
  a.compute_policy = ComputePolicy::kFair;
  a.containers[1].gpus[0].compute = ComputePair{250, 1000};
  json doc = AssignmentToJson(a);
  EXPECT_EQ(doc["compute_policy"], "fair");
  EXPECT_EQ(doc["containers"][1]["gpus"][0]["compute"]["request_milli"], 250);
  EXPECT_EQ(doc["containers"][1]["gpus"][0]["compute"]["limit_milli"], 1000);
  EXPECT_FALSE(doc["containers"][0]["gpus"][0].contains("compute")) << "whole GPUs: none";
  StatusOr<Assignment> back = AssignmentFromJson(json::parse(doc.dump()));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, a);

  for (const auto& [request, limit] :
       std::vector<std::pair<int, int>>{{0, 10}, {600, 500}, {250, 1001}}) {
    json bad = doc;
    bad["containers"][1]["gpus"][0]["compute"] = {{"request_milli", request},
                                                  {"limit_milli", limit}};
    // As the annotation's text parses: the numbers unsigned.
    EXPECT_THAT(AssignmentFromJson(json::parse(bad.dump())).status().message(),
                HasSubstr("containers[1].gpus[0].compute is"))
        << request << " to " << limit;
  }
  json no_limit = doc;
  no_limit["containers"][1]["gpus"][0]["compute"].erase("limit_milli");
  EXPECT_THAT(AssignmentFromJson(no_limit).status().message(),
              HasSubstr("containers[1].gpus[0].compute.limit_milli"));
  json bad_policy = doc;
  bad_policy["compute_policy"] = "nice";
  EXPECT_THAT(AssignmentFromJson(bad_policy).status().message(),
              HasSubstr("gpufrac.io/assignment.compute_policy"));
}

TEST(AssignmentTest, TimeIsOptional) {
  json doc = AssignmentToJson(MixedAssignment());
  doc.erase("time_ms");
  StatusOr<Assignment> a = AssignmentFromJson(doc);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->time_ms, 0);
}

TEST(AssignmentTest, MalformedDocumentsNameTheField) {
  const json good = AssignmentToJson(MixedAssignment());
  struct Case {
    std::string what;
    std::function<void(json&)> spoil;
    std::string field;
  };
  const std::vector<Case> cases = {
      {"no version", [](json& d) { d.erase("version"); }, "gpufrac.io/assignment.version"},
      {"version 9", [](json& d) { d["version"] = 9; }, "gpufrac.io/assignment.version"},
      {"no node", [](json& d) { d.erase("node"); }, "gpufrac.io/assignment.node"},
      {"containers not a list", [](json& d) { d["containers"] = json::object(); },
       "gpufrac.io/assignment.containers"},
      {"no name", [](json& d) { d["containers"][1].erase("name"); }, "containers[1].name"},
      {"no gpus", [](json& d) { d["containers"][0]["gpus"] = json::array(); },
       "containers[0].gpus"},
      {"no uuid", [](json& d) { d["containers"][0]["gpus"][1].erase("uuid"); },
       "containers[0].gpus[1].uuid"},
      {"milli zero", [](json& d) { d["containers"][0]["gpus"][0]["milli"] = 0; },
       "containers[0].gpus[0]"},
      {"milli above a GPU", [](json& d) { d["containers"][0]["gpus"][0]["milli"] = 1001; },
       "containers[0].gpus[0]"},
      {"milli negative", [](json& d) { d["containers"][0]["gpus"][0]["milli"] = -5; },
       "containers[0].gpus[0].milli"},
      {"index negative", [](json& d) { d["containers"][0]["gpus"][1]["index"] = -1; },
       "containers[0].gpus[1]"},
      {"mig without size", [](json& d) { d["containers"][1]["gpus"][0]["mig"].erase("size"); },
       "containers[1].gpus[0].mig.size"},
      {"mig not an object", [](json& d) { d["containers"][1]["gpus"][0]["mig"] = "2g.20gb"; },
       "containers[1].gpus[0].mig"},
  };
  for (const Case& c : cases) {
    json doc = good;
    c.spoil(doc);
    StatusOr<Assignment> a = Assignment{};
    EXPECT_NO_THROW(a = AssignmentFromJson(doc)) << c.what;
    EXPECT_FALSE(a.ok()) << c.what;
    if (a.ok()) continue;
    EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument) << c.what;
    EXPECT_THAT(a.status().message(), HasSubstr(c.field)) << c.what;
  }
}

// ---- Shared GPUs ----

TEST(LedgerTest, FractionsFillASharedGpuThenTheNextIsRefusedWithAReason) {
  auto ledger = NewLedger();
  ledger->SetNode("n1", Inventory("n1", 1, "A100-40GB"));
  const uint64_t total = ModelMemory("A100-40GB");

  Assignment a = Place(*ledger, "ns/a", Pod({Fraction(600)}), "n1");
  EXPECT_EQ(a.node, "n1");
  ASSERT_EQ(a.containers.size(), 1u);
  EXPECT_EQ(a.containers[0].container, "main");
  ASSERT_EQ(a.containers[0].gpus.size(), 1u);
  EXPECT_EQ(a.containers[0].gpus[0].index, 0);
  EXPECT_EQ(a.containers[0].gpus[0].uuid, "GPU-n1-0");
  EXPECT_EQ(a.containers[0].gpus[0].milli, 600u);
  EXPECT_EQ(a.containers[0].gpus[0].memory_bytes, total * 600 / 1000);
  EXPECT_FALSE(a.containers[0].gpus[0].mig.has_value());

  EXPECT_TRUE(Fits(*ledger, Pod({Fraction(400)}), "n1"));
  Ledger::Verdict half = EvaluateOne(*ledger, Pod({Fraction(500)}), "n1");
  EXPECT_FALSE(half.fits);
  EXPECT_THAT(half.reason, HasSubstr("main"));
  EXPECT_FALSE(half.reason.empty());

  Place(*ledger, "ns/b", Pod({Fraction(400)}), "n1");
  Ledger::Verdict full = EvaluateOne(*ledger, Pod({Fraction(1)}), "n1");
  EXPECT_FALSE(full.fits);
  EXPECT_FALSE(full.reason.empty());
  StatusOr<Assignment> refused = ledger->Choose(Pod({Fraction(1)}), "n1");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status().message(), HasSubstr("n1"));
  EXPECT_THAT(ledger->Overbooked(), IsEmpty());
}

// A request no GPU of a node can ever hold gets, in the pod's words, the reason of every kind
// of GPU there (the scheduler's FailedScheduling event shows it): here 90000 MiB on two shared
// H100s and one in MIG mode, where the event used to name only the MIG GPU, with a command-line
// flag.
TEST(LedgerTest, ANodeThatCanNeverHoldARequestSaysWhyForEveryKindOfGpu) {
  auto ledger = NewLedger();
  NodeInventory inv = Inventory("n1", 2, "H100-80GB");
  inv.gpus.push_back(Gpu("n1", 2, "H100-80GB", GpuMode::kMig));
  inv.gpus.push_back(Gpu("n1", 3, "A100-80GB", GpuMode::kWhole));
  inv.gpus.push_back(Gpu("n1", 4, "A100-80GB", GpuMode::kShared, /*healthy=*/false));
  ledger->SetNode("n1", inv);
  Ledger::Verdict v = EvaluateOne(*ledger, Pod({Memory(90000 * kMiB)}), "n1");
  EXPECT_FALSE(v.fits);
  EXPECT_EQ(v.reason,
            "container main (gpufrac.io/gpu: 1, gpufrac.io/gpu-memory: 90000 MiB): no GPU on this "
            "node can hold it: 2 x H100-80GB shared: 79.65 GiB each, at most " +
                FormatSize(ModelMemory("H100-80GB") -
                           gpu::ContextChargeBytes(gpu::FindModel("H100-80GB"))) +
                " of it for gpufrac.io/gpu-memory beside a CUDA context; 1 x H100-80GB mig: in "
                "MIG mode: more than its largest MIG profile, 7g.80gb, holds; 1 x A100-80GB "
                "whole: whole GPUs only (ask gpufrac.io/gpu without gpufrac.io/gpu-memory); 1 x "
                "A100-80GB shared unhealthy: unhealthy");
  // Two whole GPUs on a node whose one free kind has one: each kind says what it lacks.
  Ledger::Verdict two = EvaluateOne(*ledger, Pod({Whole(3)}), "n1");
  EXPECT_THAT(two.reason, HasSubstr("2 x H100-80GB shared: 2 of them, 3 asked (gpufrac.io/gpu)"));
  EXPECT_THAT(two.reason, HasSubstr("1 x H100-80GB mig: in MIG mode: its instances are given "
                                    "out, not whole GPUs"));
  // A request that only has to wait says so, not why it never fits.
  Ledger::Verdict later = EvaluateOne(*ledger, Pod({Memory(40 * kGiB)}), "n1");
  EXPECT_TRUE(later.fits) << later.reason;
}

TEST(LedgerTest, MemoryRequestsTakeTheirShareOfTheGpu) {
  auto ledger = NewLedger();
  ledger->SetNode("n1", Inventory("n1", 1, "A100-40GB"));  // 40960 MiB.
  Assignment a = Place(*ledger, "ns/a", Pod({Memory(10240 * kMiB)}), "n1");
  ASSERT_EQ(a.containers.size(), 1u);
  ASSERT_EQ(a.containers[0].gpus.size(), 1u);
  EXPECT_EQ(a.containers[0].gpus[0].milli, 250u);
  EXPECT_EQ(a.containers[0].gpus[0].memory_bytes, 10240 * kMiB);
  // A share that is not a whole number of thousandths is rounded up.
  Assignment b = Place(*ledger, "ns/b", Pod({Memory(4097 * kMiB)}), "n1");
  ASSERT_EQ(b.containers.size(), 1u);
  EXPECT_EQ(b.containers[0].gpus[0].milli, 101u);
  // 1000 - 250 - 101 = 649 thousandths left: 25 GiB (625 thousandths) fits, 26 GiB (650) does not.
  EXPECT_TRUE(Fits(*ledger, Pod({Memory(25 * kGiB)}), "n1"));
  EXPECT_FALSE(Fits(*ledger, Pod({Memory(26 * kGiB)}), "n1"));
  // More memory than the GPU has never fits, with a reason saying so.
  Ledger::Verdict huge = EvaluateOne(*ledger, Pod({Memory(41 * kGiB)}), "n1");
  EXPECT_FALSE(huge.fits);
  EXPECT_THAT(huge.reason, HasSubstr("no GPU on this node can hold it"));
}

TEST(LedgerTest, FractionsAndMemoryShareOneGpu) {
  auto ledger = NewLedger();
  ledger->SetNode("n1", Inventory("n1", 1, "A100-40GB"));
  Place(*ledger, "ns/a", Pod({Fraction(500)}), "n1");
  EXPECT_TRUE(Fits(*ledger, Pod({Memory(20 * kGiB)}), "n1"));
  EXPECT_FALSE(Fits(*ledger, Pod({Memory(21 * kGiB)}), "n1"));
  EXPECT_FALSE(Fits(*ledger, Pod({Whole(1)}), "n1"));
}

ContainerRequest Computing(ContainerRequest c, std::optional<uint32_t> compute,
                           std::optional<uint32_t> limit = std::nullopt) {
  c.request.compute_milli = compute;
  c.request.compute_limit_milli = limit;
  return c;
}

TEST(LedgerTest, ComputeRequestsAreTheSharesOfAGpu) {
  auto ledger = NewLedger();
  ledger->SetNode("n1", Inventory("n1", 1, "A100-40GB"));
  Assignment a = Place(*ledger, "ns/a", Pod({Computing(Memory(2 * kGiB), 600, 800)}), "n1");
  ASSERT_EQ(a.containers.size(), 1u);
  EXPECT_EQ(a.containers[0].gpus.at(0).milli, 600u);
  EXPECT_EQ(a.containers[0].gpus.at(0).memory_bytes, 2 * kGiB);
  EXPECT_EQ(a.containers[0].compute_limit_milli, 800u);
  // 38 GiB of memory are free, 0.4 of the GPU's time.
  EXPECT_TRUE(Fits(*ledger, Pod({Computing(Memory(kGiB), 400)}), "n1"));
  Ledger::Verdict over = EvaluateOne(*ledger, Pod({Computing(Memory(kGiB), 401)}), "n1");
  EXPECT_FALSE(over.fits);
  EXPECT_THAT(over.reason, HasSubstr("gpufrac.io/gpu-compute: 0.401"));
  // Without a compute request the memory's share is its share of the GPU's time.
  EXPECT_FALSE(Fits(*ledger, Pod({Memory(20 * kGiB)}), "n1"));
  EXPECT_TRUE(Fits(*ledger, Pod({Memory(16 * kGiB)}), "n1"));
  // Memory is still a dimension of its own: a small compute share with more memory than is free.
  EXPECT_FALSE(Fits(*ledger, Pod({Computing(Memory(39 * kGiB), 10)}), "n1"));
  Place(*ledger, "ns/b", Pod({Computing(Fraction(100), 400)}), "n1");
  EXPECT_FALSE(Fits(*ledger, Pod({Computing(Memory(kMiB), 1)}), "n1"));
  EXPECT_THAT(ledger->Overbooked(), IsEmpty());
  // The books are rebuilt from the assignments as recorded.
  auto rebuilt = NewLedger();
  rebuilt->SetNode("n1", Inventory("n1", 1, "A100-40GB"));
  rebuilt->Book("ns/a", a);
  EXPECT_TRUE(Fits(*rebuilt, Pod({Computing(Memory(kGiB), 400)}), "n1"));
  EXPECT_FALSE(Fits(*rebuilt, Pod({Computing(Memory(kGiB), 401)}), "n1"));
}

TEST(LedgerTest, OnlySharesRecordAComputeLimit) {
  auto ledger = NewLedger();
  ledger->SetNode("n1", Inventory("n1", 2, "A100-40GB"));
  Assignment a = Place(*ledger, "ns/a", Pod({Computing(Fraction(250), std::nullopt, 500)}), "n1");
  ASSERT_EQ(a.containers.size(), 1u);
  EXPECT_EQ(a.containers[0].gpus.at(0).milli, 250u);
  EXPECT_EQ(a.containers[0].compute_limit_milli, 500u);
  Assignment w = Place(*ledger, "ns/w", Pod({Whole(1)}), "n1");
  EXPECT_EQ(w.containers.at(0).compute_limit_milli, std::nullopt);
}

// The extender decides each share's pair by the policy the node's agent publishes, once, and the
// assignment carries it with that policy; a node whose agent publishes none gets no pairs (its
// agent decides them, as before).
TEST(LedgerTest, SharesGetTheComputePairOfTheNodesPolicy) {
  auto ledger = NewLedger();
  for (auto [name, policy] :
       std::vector<std::pair<std::string, ComputePolicy>>{{"fair", ComputePolicy::kFair},
                                                          {"strict", ComputePolicy::kStrict},
                                                          {"off", ComputePolicy::kOff}}) {
    NodeInventory inv = Inventory(name, 2, "A100-40GB");
    inv.compute_policy = policy;
    ledger->SetNode(name, inv);
  }
  Assignment fair = Place(*ledger, "ns/f", Pod({Fraction(250)}), "fair");
  EXPECT_EQ(fair.compute_policy, ComputePolicy::kFair);
  EXPECT_EQ(fair.containers[0].gpus[0].compute, (ComputePair{250, 1000}));
  Assignment asked = Place(*ledger, "ns/a", Pod({Computing(Fraction(250), std::nullopt, 500)}), "fair");
  EXPECT_EQ(asked.containers[0].gpus[0].compute, (ComputePair{250, 500}));
  Assignment strict = Place(*ledger, "ns/s", Pod({Fraction(250)}), "strict");
  EXPECT_EQ(strict.compute_policy, ComputePolicy::kStrict);
  EXPECT_EQ(strict.containers[0].gpus[0].compute, (ComputePair{250, 250}));
  Assignment off = Place(*ledger, "ns/o", Pod({Computing(Fraction(250), std::nullopt, 500)}), "off");
  EXPECT_EQ(off.compute_policy, ComputePolicy::kOff);
  EXPECT_EQ(off.containers[0].gpus[0].compute, std::nullopt) << "not arbitrated";
  Assignment whole = Place(*ledger, "ns/w", Pod({Whole(1)}), "fair");
  EXPECT_EQ(whole.containers[0].gpus[0].compute, std::nullopt);

  ledger->SetNode("old", Inventory("old", 1, "A100-40GB"));
  Assignment old = Place(*ledger, "ns/old", Pod({Computing(Fraction(250), std::nullopt, 500)}), "old");
  EXPECT_EQ(old.compute_policy, std::nullopt);
  EXPECT_EQ(old.containers[0].gpus[0].compute, std::nullopt);
  EXPECT_EQ(old.containers[0].compute_limit_milli, 500u) << "what the agent decides from";
  // Read back from the annotation, a booking is the one the extender made.
  for (const Assignment& a : {fair, asked, strict, off, whole, old}) {
    EXPECT_EQ(*AssignmentFromJson(json::parse(AssignmentToJson(a).dump())), a);
  }
}

// ---- Whole-only, unhealthy, several GPUs, models ----

TEST(LedgerTest, WholeOnlyGpusRefuseFractionsButTakeWholeGpus) {
  auto ledger = NewLedger();
  ledger->SetNode("n1", Inventory("n1", 2, "H100-80GB", GpuMode::kWhole));
  Ledger::Verdict frac = EvaluateOne(*ledger, Pod({Fraction(500)}), "n1");
  EXPECT_FALSE(frac.fits);
  EXPECT_THAT(frac.reason, HasSubstr("whole"));
  EXPECT_FALSE(Fits(*ledger, Pod({Memory(4 * kGiB)}), "n1"));
  EXPECT_TRUE(Fits(*ledger, Pod({Whole(2)}), "n1"));
  EXPECT_FALSE(Fits(*ledger, Pod({Whole(3)}), "n1"));

  Assignment a = Place(*ledger, "ns/a", Pod({Whole(1)}), "n1");
  ASSERT_EQ(a.containers.size(), 1u);
  ASSERT_EQ(a.containers[0].gpus.size(), 1u);
  EXPECT_EQ(a.containers[0].gpus[0].milli, 1000u);
  EXPECT_EQ(a.containers[0].gpus[0].memory_bytes, ModelMemory("H100-80GB"));
  EXPECT_TRUE(Fits(*ledger, Pod({Whole(1)}), "n1"));
  EXPECT_FALSE(Fits(*ledger, Pod({Whole(2)}), "n1"));
}

TEST(LedgerTest, UnhealthyGpusAreNotUsed) {
  auto ledger = NewLedger();
  NodeInventory inv = Inventory("n1", 2, "A100-80GB");
  inv.gpus[0].healthy = false;
  ledger->SetNode("n1", inv);
  EXPECT_FALSE(Fits(*ledger, Pod({Whole(2)}), "n1"));
  Assignment a = Place(*ledger, "ns/a", Pod({Fraction(100)}), "n1");
  ASSERT_EQ(a.containers.size(), 1u);
  EXPECT_EQ(a.containers[0].gpus[0].index, 1);
  Assignment b = Place(*ledger, "ns/b", Pod({Fraction(900)}), "n1");
  EXPECT_EQ(b.containers[0].gpus[0].index, 1);
  EXPECT_FALSE(Fits(*ledger, Pod({Fraction(1)}), "n1"));
}

TEST(LedgerTest, SeveralWholeGpusMustBeFreeAndOfOneModel) {
  auto ledger = NewLedger();
  ledger->SetNode("n4", Inventory("n4", 4, "A100-80GB"));
  Assignment a = Place(*ledger, "ns/a", Pod({Whole(2)}), "n4");
  ASSERT_EQ(a.containers.size(), 1u);
  ASSERT_EQ(a.containers[0].gpus.size(), 2u);
  std::set<int> taken;
  for (const GpuGrant& g : a.containers[0].gpus) {
    EXPECT_EQ(g.milli, 1000u);
    EXPECT_EQ(g.uuid, "GPU-n4-" + std::to_string(g.index));
    taken.insert(g.index);
  }
  EXPECT_EQ(taken.size(), 2u);
  // A fraction on one of the two free GPUs leaves one whole GPU free.
  Place(*ledger, "ns/b", Pod({Fraction(100)}), "n4");
  EXPECT_TRUE(Fits(*ledger, Pod({Whole(1)}), "n4"));
  EXPECT_FALSE(Fits(*ledger, Pod({Whole(2)}), "n4"));

  NodeInventory mixed;
  mixed.slots_per_gpu = 4;
  mixed.gpus = {Gpu("mixed", 0, "A100-80GB", GpuMode::kShared),
                Gpu("mixed", 1, "H100-80GB", GpuMode::kShared)};
  ledger->SetNode("mixed", mixed);
  EXPECT_TRUE(Fits(*ledger, Pod({Whole(1)}), "mixed"));
  Ledger::Verdict two = EvaluateOne(*ledger, Pod({Whole(2)}), "mixed");
  EXPECT_FALSE(two.fits) << "two GPUs of different models are not 2 GPUs of one kind";
  EXPECT_FALSE(two.reason.empty());
}

TEST(LedgerTest, GpuModelRestriction) {
  auto ledger = NewLedger();
  ledger->SetNode("a100", Inventory("a100", 1, "A100-80GB"));
  ledger->SetNode("h100", Inventory("h100", 1, "H100-80GB"));
  ContainerRequest r = Fraction(250);
  r.request.gpu_model = "H100-80GB";
  std::vector<Ledger::Verdict> v = ledger->Evaluate(Pod({r}), {"a100", "h100"});
  ASSERT_EQ(v.size(), 2u);
  EXPECT_FALSE(v[0].fits);
  EXPECT_FALSE(v[0].reason.empty());
  EXPECT_TRUE(v[1].fits);
  r.request.gpu_model = "h100-80gb";  // Model names compare ignoring case.
  EXPECT_TRUE(Fits(*ledger, Pod({r}), "h100"));
  Assignment a = Place(*ledger, "ns/a", Pod({r}), "h100");
  EXPECT_EQ(a.containers[0].gpus[0].uuid, "GPU-h100-0");
}

TEST(LedgerTest, UnknownNodeHasAReason) {
  auto ledger = NewLedger();
  Ledger::Verdict v = EvaluateOne(*ledger, Pod({Whole(1)}), "ghost");
  EXPECT_FALSE(v.fits);
  EXPECT_THAT(v.reason, HasSubstr("no gpufrac agent"));
  StatusOr<Assignment> a = ledger->Choose(Pod({Whole(1)}), "ghost");
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), StatusCode::kNotFound);
}

// A pod that asks for no GPU is none of the GPU books' business: it fits every node, also those
// without a gpufrac agent (CPU-only nodes), as the header's contract ("how `request` fits").
TEST(LedgerTest, ARequestForNoGpuFitsEveryNode) {
  auto ledger = NewLedger();
  ledger->SetNode("gpu", Inventory("gpu", 1, "A100-80GB"));
  std::vector<Ledger::Verdict> v = ledger->Evaluate(PodRequest{}, {"gpu", "cpu-only"});
  ASSERT_EQ(v.size(), 2u);
  EXPECT_TRUE(v[0].fits);
  EXPECT_TRUE(v[1].fits) << v[1].reason;
}

// ---- Pods of several containers ----

// placement::GroupHostGpus's one rule, as gpufracd follows it: a node with more alike GPUs than
// a placement node holds offers none of them, saying why (it offered the first 32 before);
// its MIG GPUs still serve.
TEST(LedgerTest, ANodeWithMoreAlikeGpusThanPlacementHoldsOffersNoneOfThemAndSaysWhy) {
  auto ledger = NewLedger();
  NodeInventory inv = Inventory("big", 33, "H100-80GB");
  inv.gpus.push_back(Gpu("big", 33, "H100-80GB", GpuMode::kMig));
  ledger->SetNode("big", inv);
  Ledger::Verdict v = EvaluateOne(*ledger, Pod({Whole(1)}), "big");
  EXPECT_FALSE(v.fits);
  EXPECT_THAT(v.reason, HasSubstr("33 x H100-80GB shared: more than 32 H100-80GB GPUs on one node "
                                  "are not supported"));
  EXPECT_FALSE(ledger->Choose(Pod({Whole(1)}), "big").ok());
  EXPECT_TRUE(Fits(*ledger, Pod({Mig("1g.10gb")}), "big"));

  ledger->SetNode("most", Inventory("most", 32, "H100-80GB"));
  EXPECT_TRUE(Fits(*ledger, Pod({Whole(32)}), "most"));
}

TEST(LedgerTest, ContainersOfOnePodMustFitTogether) {
  auto ledger = NewLedger();
  ledger->SetNode("one", Inventory("one", 1, "A100-80GB"));
  EXPECT_TRUE(Fits(*ledger, Pod({Fraction(600, "a")}), "one"));
  EXPECT_TRUE(Fits(*ledger, Pod({Fraction(600, "b")}), "one"));
  Ledger::Verdict both = EvaluateOne(*ledger, Pod({Fraction(600, "a"), Fraction(600, "b")}), "one");
  EXPECT_FALSE(both.fits);
  EXPECT_THAT(both.reason, HasSubstr("container b"));
  EXPECT_FALSE(ledger->Choose(Pod({Fraction(600, "a"), Fraction(600, "b")}), "one").ok());

  Assignment a = Place(*ledger, "ns/p", Pod({Fraction(400, "a"), Fraction(500, "b")}), "one");
  ASSERT_EQ(a.containers.size(), 2u);
  EXPECT_EQ(a.containers[0].container, "a");
  EXPECT_EQ(a.containers[0].gpus[0].milli, 400u);
  EXPECT_EQ(a.containers[1].container, "b");
  EXPECT_EQ(a.containers[1].gpus[0].milli, 500u);
  EXPECT_EQ(a.containers[0].gpus[0].index, 0);
  EXPECT_EQ(a.containers[1].gpus[0].index, 0);
  // Both containers are booked: 100 thousandths remain.
  EXPECT_TRUE(Fits(*ledger, Pod({Fraction(100)}), "one"));
  EXPECT_FALSE(Fits(*ledger, Pod({Fraction(101)}), "one"));

  ledger->SetNode("two", Inventory("two", 2, "A100-80GB"));
  Assignment spread = Place(*ledger, "ns/q", Pod({Fraction(600, "a"), Fraction(600, "b")}), "two");
  ASSERT_EQ(spread.containers.size(), 2u);
  EXPECT_NE(spread.containers[0].gpus[0].index, spread.containers[1].gpus[0].index);
  EXPECT_THAT(ledger->Overbooked(), IsEmpty());
}

// ---- MPS GPUs: one user's containers at a time ----

ContainerRequest As(ContainerRequest c, const std::string& user) {
  c.run_as = user;
  return c;
}

// An MPS server serves one Linux user's clients; another user's client waits until that server
// has exited. So an MPS GPU that holds a container of uid 1000 takes more of uid 1000 and none of
// uid 2000 until the last of uid 1000 leaves.
TEST(LedgerTest, AnMpsGpuServesOneUsersContainersAtATime) {
  auto ledger = NewLedger();
  ledger->SetNode("n", Inventory("n", 1, "H100-80GB", GpuMode::kMps));
  Assignment a = Place(*ledger, "ns/a", Pod({As(Fraction(250), "uid 1000")}), "n");
  EXPECT_EQ(a.containers[0].mps_user, "uid 1000");
  Place(*ledger, "ns/b", Pod({As(Fraction(250), "uid 1000")}), "n");

  Ledger::Verdict other = EvaluateOne(*ledger, Pod({As(Fraction(250), "uid 2000")}), "n");
  EXPECT_FALSE(other.fits);
  EXPECT_THAT(other.reason, HasSubstr("serve other users"));
  EXPECT_THAT(other.reason, HasSubstr("uid 2000"));
  StatusOr<Assignment> refused = ledger->Choose(Pod({As(Fraction(250), "uid 2000")}), "n");
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("one user at a time"));

  ledger->Unbook("ns/a");
  EXPECT_FALSE(Fits(*ledger, Pod({As(Fraction(250), "uid 2000")}), "n")) << "ns/b still there";
  ledger->Unbook("ns/b");
  EXPECT_TRUE(Fits(*ledger, Pod({As(Fraction(250), "uid 2000")}), "n"));
}

TEST(LedgerTest, UsersOfMpsGpusGetGpusOfTheirOwn) {
  auto ledger = NewLedger();
  ledger->SetNode("n", Inventory("n", 2, "H100-80GB", GpuMode::kMps));
  Assignment a = Place(*ledger, "ns/a", Pod({As(Fraction(100), "uid 1000")}), "n");
  Assignment b = Place(*ledger, "ns/b", Pod({As(Fraction(100), "uid 2000")}), "n");
  EXPECT_NE(a.containers[0].gpus[0].index, b.containers[0].gpus[0].index);
  Assignment c = Place(*ledger, "ns/c", Pod({As(Fraction(100), "uid 1000")}), "n");
  EXPECT_EQ(c.containers[0].gpus[0].index, a.containers[0].gpus[0].index);
  EXPECT_FALSE(Fits(*ledger, Pod({As(Fraction(100), "uid 3000")}), "n"));
}

TEST(LedgerTest, ContainersOfOnePodRunningAsTwoUsersTakeTwoMpsGpus) {
  auto ledger = NewLedger();
  ledger->SetNode("one", Inventory("one", 1, "H100-80GB", GpuMode::kMps));
  const PodRequest two_users =
      Pod({As(Fraction(100, "a"), "uid 1000"), As(Fraction(100, "b"), "uid 2000")});
  Ledger::Verdict v = EvaluateOne(*ledger, two_users, "one");
  EXPECT_FALSE(v.fits);
  EXPECT_THAT(v.reason, HasSubstr("container b"));
  EXPECT_TRUE(Fits(*ledger,
                   Pod({As(Fraction(100, "a"), "uid 1000"), As(Fraction(100, "b"), "uid 1000")}),
                   "one"));

  ledger->SetNode("two", Inventory("two", 2, "H100-80GB", GpuMode::kMps));
  Assignment p = Place(*ledger, "ns/p", two_users, "two");
  ASSERT_EQ(p.containers.size(), 2u);
  EXPECT_NE(p.containers[0].gpus[0].index, p.containers[1].gpus[0].index);
  EXPECT_EQ(p.containers[1].mps_user, "uid 2000");
}

// The rule is MPS's: shared GPUs (time-sliced under the limiter) take any users together, and
// their bookings record no user.
TEST(LedgerTest, SharedGpusTakeSeveralUsersTogether) {
  auto ledger = NewLedger();
  ledger->SetNode("n", Inventory("n", 1, "H100-80GB"));
  Assignment a = Place(*ledger, "ns/a", Pod({As(Fraction(250), "uid 1000")}), "n");
  EXPECT_EQ(a.containers[0].mps_user, "");
  Assignment b = Place(*ledger, "ns/b", Pod({As(Fraction(250), "uid 2000")}), "n");
  EXPECT_EQ(b.containers[0].gpus[0].index, 0);
}

// The user is part of the booking (the pod's gpufrac.io/assignment), so an extender that starts
// again from the pods' annotations keeps the rule.
TEST(LedgerTest, AnMpsGpusUserIsKeptInTheAssignment) {
  auto first = NewLedger();
  first->SetNode("n", Inventory("n", 1, "H100-80GB", GpuMode::kMps));
  Assignment a = Place(*first, "ns/a", Pod({As(Fraction(250), "uid 1000")}), "n");
  StatusOr<Assignment> back = AssignmentFromJson(json::parse(AssignmentToJson(a).dump()));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->containers[0].mps_user, "uid 1000");

  auto restarted = NewLedger();
  restarted->SetNode("n", Inventory("n", 1, "H100-80GB", GpuMode::kMps));
  restarted->Book("ns/a", *back);
  EXPECT_FALSE(Fits(*restarted, Pod({As(Fraction(250), "uid 2000")}), "n"));
  EXPECT_TRUE(Fits(*restarted, Pod({As(Fraction(250), "uid 1000")}), "n"));
}

TEST(LedgerTest, WholeAndSharedContainersTogether) {
  auto ledger = NewLedger();
  ledger->SetNode("n", Inventory("n", 2, "A100-80GB"));
  EXPECT_TRUE(Fits(*ledger, Pod({Whole(1, "a"), Fraction(900, "b")}), "n"));
  EXPECT_FALSE(Fits(*ledger, Pod({Whole(2, "a"), Fraction(100, "b")}), "n"));
  Assignment a = Place(*ledger, "ns/p", Pod({Whole(1, "a"), Fraction(900, "b")}), "n");
  ASSERT_EQ(a.containers.size(), 2u);
  EXPECT_NE(a.containers[0].gpus[0].index, a.containers[1].gpus[0].index);
}

// ---- MIG GPUs ----

TEST(LedgerTest, MigProfileGetsALegalPlacement) {
  auto ledger = NewLedger();
  ledger->SetNode("m", Inventory("m", 1, "A100-40GB", GpuMode::kMig));
  Assignment a = Place(*ledger, "ns/a", Pod({Mig("3g.20gb")}), "m");
  ASSERT_EQ(a.containers.size(), 1u);
  ASSERT_EQ(a.containers[0].gpus.size(), 1u);
  const GpuGrant& g = a.containers[0].gpus[0];
  EXPECT_EQ(g.index, 0);
  EXPECT_EQ(g.uuid, "GPU-m-0");
  ASSERT_TRUE(g.mig.has_value());
  const gpu::MigProfile& p = Profile("A100-40GB", "3g.20gb");
  EXPECT_EQ(g.mig->profile, "3g.20gb");
  EXPECT_EQ(g.mig->size, p.memory_slices);
  EXPECT_TRUE(LegalStart(p, g.mig->start)) << g.mig->start;
  EXPECT_EQ(g.memory_bytes, p.memory_bytes);
  EXPECT_EQ(g.milli, 1000u * p.memory_slices / 8);
  // Whole GPUs are not served by a MIG-only node.
  EXPECT_FALSE(Fits(*ledger, Pod({Whole(1)}), "m"));
  // A profile the model does not have: a reason, no fit.
  Ledger::Verdict v = EvaluateOne(*ledger, Pod({Mig("7g.80gb")}), "m");
  EXPECT_FALSE(v.fits);
  EXPECT_FALSE(v.reason.empty());
}

TEST(LedgerTest, MemoryAndFractionOnAMigNodeGetTheSmallestProfile) {
  auto ledger = NewLedger();
  ledger->SetNode("m", Inventory("m", 1, "H100-80GB", GpuMode::kMig));
  StatusOr<Assignment> mem = ledger->Choose(Pod({Memory(10 * kGiB)}), "m");
  ASSERT_TRUE(mem.ok()) << mem.status();
  ASSERT_TRUE(mem->containers[0].gpus[0].mig.has_value());
  EXPECT_EQ(mem->containers[0].gpus[0].mig->profile, "1g.10gb");
  StatusOr<Assignment> frac = ledger->Choose(Pod({Fraction(250)}), "m");
  ASSERT_TRUE(frac.ok()) << frac.status();
  ASSERT_TRUE(frac->containers[0].gpus[0].mig.has_value());
  EXPECT_EQ(frac->containers[0].gpus[0].mig->profile, "2g.20gb");
}

TEST(LedgerTest, BookedMigPlacementsAreBusy) {
  auto ledger = NewLedger();
  ledger->SetNode("m", Inventory("m", 1, "H100-80GB", GpuMode::kMig));
  Assignment a = Place(*ledger, "ns/a", Pod({Mig("3g.40gb")}), "m");
  Assignment b = Place(*ledger, "ns/b", Pod({Mig("3g.40gb")}), "m");
  ASSERT_TRUE(a.containers[0].gpus[0].mig && b.containers[0].gpus[0].mig);
  EXPECT_NE(a.containers[0].gpus[0].mig->start, b.containers[0].gpus[0].mig->start);
  Ledger::Verdict third = EvaluateOne(*ledger, Pod({Mig("1g.10gb")}), "m");
  EXPECT_FALSE(third.fits);
  EXPECT_FALSE(third.reason.empty());
  // Giving one back makes its slices usable again.
  ASSERT_TRUE(ledger->Unbook("ns/a"));
  EXPECT_TRUE(Fits(*ledger, Pod({Mig("1g.10gb")}), "m"));
}

TEST(LedgerTest, TwoMigContainersOfOnePodGetDistinctPlacements) {
  auto ledger = NewLedger();
  ledger->SetNode("m", Inventory("m", 1, "H100-80GB", GpuMode::kMig));
  Assignment a = Place(*ledger, "ns/a", Pod({Mig("3g.40gb", "x"), Mig("3g.40gb", "y")}), "m");
  ASSERT_EQ(a.containers.size(), 2u);
  ASSERT_TRUE(a.containers[0].gpus[0].mig && a.containers[1].gpus[0].mig);
  EXPECT_NE(a.containers[0].gpus[0].mig->start, a.containers[1].gpus[0].mig->start);
  EXPECT_FALSE(Fits(*ledger, Pod({Mig("3g.40gb", "x"), Mig("3g.40gb", "y")}), "m"));
}

TEST(LedgerTest, IdleInstancesAreReusedAndBusyOnesAreNot) {
  auto ledger = NewLedger();
  NodeInventory inv = Inventory("m", 1, "H100-80GB", GpuMode::kMig);
  inv.gpus[0].mig.push_back(
      {.profile = "2g.20gb", .start = 4, .size = 2, .uuid = "MIG-idle", .pod = ""});
  ledger->SetNode("m", inv);
  Assignment a = Place(*ledger, "ns/a", Pod({Mig("2g.20gb")}), "m");
  ASSERT_TRUE(a.containers[0].gpus[0].mig.has_value());
  EXPECT_EQ(a.containers[0].gpus[0].mig->start, 4) << "the idle instance is the one to use";

  // An instance the inventory says serves a pod is never given to another.
  NodeInventory busy = Inventory("b", 1, "H100-80GB", GpuMode::kMig);
  busy.gpus[0].mig.push_back(
      {.profile = "7g.80gb", .start = 0, .size = 8, .uuid = "MIG-busy", .pod = "ns/other"});
  ledger->SetNode("b", busy);
  EXPECT_FALSE(Fits(*ledger, Pod({Mig("1g.10gb")}), "b"));
}

TEST(LedgerTest, IdleInstancesInTheWayAreDestroyed) {
  auto ledger = NewLedger();
  NodeInventory inv = Inventory("m", 1, "H100-80GB", GpuMode::kMig);
  for (int s = 0; s < 7; ++s) {
    inv.gpus[0].mig.push_back({.profile = "1g.10gb",
                               .start = s,
                               .size = 1,
                               .uuid = "MIG-" + std::to_string(s),
                               .pod = ""});
  }
  ledger->SetNode("m", inv);
  Assignment a = Place(*ledger, "ns/a", Pod({Mig("7g.80gb")}), "m");
  ASSERT_TRUE(a.containers[0].gpus[0].mig.has_value());
  EXPECT_EQ(a.containers[0].gpus[0].mig->start, 0);
  EXPECT_EQ(a.containers[0].gpus[0].mig->size, 8);
  EXPECT_FALSE(Fits(*ledger, Pod({Mig("1g.10gb")}), "m"));

  // With one of them busy, the whole GPU cannot be had.
  inv.gpus[0].mig[3].pod = "ns/busy";
  ledger->SetNode("m2", inv);
  EXPECT_FALSE(Fits(*ledger, Pod({Mig("7g.80gb")}), "m2"));
  EXPECT_TRUE(Fits(*ledger, Pod({Mig("3g.40gb")}), "m2"));
}

TEST(LedgerTest, SharedGpusFirstThenMigOnAMixedNode) {
  auto ledger = NewLedger();
  NodeInventory inv;
  inv.slots_per_gpu = 4;
  inv.gpus = {Gpu("x", 0, "H100-80GB", GpuMode::kShared), Gpu("x", 1, "H100-80GB", GpuMode::kMig)};
  ledger->SetNode("x", inv);
  Assignment a = Place(*ledger, "ns/a", Pod({Fraction(900)}), "x");
  EXPECT_EQ(a.containers[0].gpus[0].index, 0);
  EXPECT_FALSE(a.containers[0].gpus[0].mig.has_value());
  // The shared GPU is nearly full: a quarter goes to the MIG GPU as 2g.20gb.
  Assignment b = Place(*ledger, "ns/b", Pod({Fraction(250)}), "x");
  EXPECT_EQ(b.containers[0].gpus[0].index, 1);
  ASSERT_TRUE(b.containers[0].gpus[0].mig.has_value());
  EXPECT_EQ(b.containers[0].gpus[0].mig->profile, "2g.20gb");
  // A whole GPU: neither.
  EXPECT_FALSE(Fits(*ledger, Pod({Whole(1)}), "x"));
}

// ---- Bookings ----

TEST(LedgerTest, UnbookFreesTheCapacity) {
  auto ledger = NewLedger();
  ledger->SetNode("n", Inventory("n", 1, "A100-80GB"));
  Assignment a = Place(*ledger, "ns/a", Pod({Whole(1)}), "n");
  EXPECT_EQ(ledger->booking_count(), 1u);
  EXPECT_EQ(ledger->PodsOn("n"), std::vector<std::string>{"ns/a"});
  ASSERT_TRUE(ledger->BookingOf("ns/a").has_value());
  EXPECT_EQ(*ledger->BookingOf("ns/a"), a);
  EXPECT_FALSE(Fits(*ledger, Pod({Fraction(1)}), "n"));

  EXPECT_TRUE(ledger->Unbook("ns/a"));
  EXPECT_FALSE(ledger->Unbook("ns/a"));
  EXPECT_EQ(ledger->booking_count(), 0u);
  EXPECT_THAT(ledger->PodsOn("n"), IsEmpty());
  EXPECT_FALSE(ledger->BookingOf("ns/a").has_value());
  EXPECT_TRUE(Fits(*ledger, Pod({Whole(1)}), "n"));
}

TEST(LedgerTest, BookingAgainReplacesTheOldBooking) {
  auto ledger = NewLedger();
  ledger->SetNode("n", Inventory("n", 1, "A100-80GB"));
  EXPECT_TRUE(Fits(*ledger, Pod({Whole(1)}), "n"));  // Builds the books before the bookings.
  ledger->Book("ns/a", OneGrant("n", 0, 800, 64 * kGiB));
  ledger->Book("ns/a", OneGrant("n", 0, 300, 24 * kGiB));
  EXPECT_EQ(ledger->booking_count(), 1u);
  EXPECT_TRUE(Fits(*ledger, Pod({Fraction(700)}), "n"));
  EXPECT_FALSE(Fits(*ledger, Pod({Fraction(701)}), "n"));
  EXPECT_THAT(ledger->Overbooked(), IsEmpty());
}

TEST(LedgerTest, BookingsOnNodesThatAppearLaterAreCounted) {
  auto ledger = NewLedger();
  ledger->SetNode("early", Inventory("early", 1, "A100-80GB"));
  EXPECT_TRUE(Fits(*ledger, Pod({Whole(1)}), "early"));
  ledger->Book("ns/a", OneGrant("late", 0, 700, 56 * kGiB));
  EXPECT_EQ(ledger->PodsOn("late"), std::vector<std::string>{"ns/a"});
  EXPECT_FALSE(EvaluateOne(*ledger, Pod({Whole(1)}), "late").fits);
  ledger->SetNode("late", Inventory("late", 1, "A100-80GB"));
  EXPECT_TRUE(Fits(*ledger, Pod({Fraction(300)}), "late"));
  EXPECT_FALSE(Fits(*ledger, Pod({Fraction(301)}), "late"));
  EXPECT_THAT(ledger->Overbooked(), IsEmpty());
}

TEST(LedgerTest, OverbookedReportsABookingBeyondTheGpu) {
  auto ledger = NewLedger();
  ledger->SetNode("n", Inventory("n", 1, "A100-80GB"));
  const uint64_t mem = ModelMemory("A100-80GB") * 7 / 10;
  ledger->Book("ns/a", OneGrant("n", 0, 700, mem));
  ledger->Book("ns/b", OneGrant("n", 0, 700, mem));
  EXPECT_EQ(ledger->booking_count(), 2u) << "bookings are never refused";
  std::vector<std::string> over = ledger->Overbooked();
  ASSERT_EQ(over.size(), 1u);
  EXPECT_TRUE(over[0] == "ns/a" || over[0] == "ns/b") << over[0];
  EXPECT_FALSE(Fits(*ledger, Pod({Fraction(1)}), "n"));
}

// After the pod that was counted first leaves, the other still holds all of its 0.7: the books
// must not offer that GPU's remaining 0.3 twice, and nothing is overbooked any more.
TEST(LedgerTest, OverbookedPodIsFullyCountedOnceTheOtherLeaves) {
  auto ledger = NewLedger();
  ledger->SetNode("n", Inventory("n", 1, "A100-80GB"));
  const uint64_t mem = ModelMemory("A100-80GB") * 7 / 10;
  ledger->Book("ns/a", OneGrant("n", 0, 700, mem));
  ledger->Book("ns/b", OneGrant("n", 0, 700, mem));
  std::vector<std::string> over = ledger->Overbooked();
  ASSERT_EQ(over.size(), 1u);
  const std::string counted = over[0] == "ns/a" ? "ns/b" : "ns/a";
  ASSERT_TRUE(ledger->Unbook(counted));
  EXPECT_THAT(ledger->Overbooked(), IsEmpty());
  EXPECT_TRUE(Fits(*ledger, Pod({Fraction(300)}), "n"));
  EXPECT_FALSE(Fits(*ledger, Pod({Fraction(600)}), "n"))
      << over[0] << " still holds 0.7 of the GPU; only 0.3 is free";
}

TEST(LedgerTest, NodeThatShrinksLeavesItsBookingsOverbooked) {
  auto ledger = NewLedger();
  ledger->SetNode("n", Inventory("n", 2, "A100-80GB"));
  Assignment a = OneGrant("n", 1, 1000, ModelMemory("A100-80GB"));
  ledger->Book("ns/a", a);
  EXPECT_THAT(ledger->Overbooked(), IsEmpty());
  ledger->SetNode("n", Inventory("n", 1, "A100-80GB"));
  EXPECT_EQ(ledger->Overbooked(), std::vector<std::string>{"ns/a"});
  EXPECT_TRUE(Fits(*ledger, Pod({Whole(1)}), "n")) << "GPU 0 is untouched";
}

TEST(LedgerTest, RemovedNodesAreNotOffered) {
  auto ledger = NewLedger();
  ledger->SetNode("n", Inventory("n", 1, "A100-80GB"));
  Place(*ledger, "ns/a", Pod({Fraction(500)}), "n");
  EXPECT_TRUE(ledger->HasNode("n"));
  ledger->RemoveNode("n");
  EXPECT_FALSE(ledger->HasNode("n"));
  Ledger::Verdict v = EvaluateOne(*ledger, Pod({Fraction(100)}), "n");
  EXPECT_FALSE(v.fits);
  EXPECT_THAT(v.reason, HasSubstr("no gpufrac agent"));
  EXPECT_EQ(ledger->Choose(Pod({Fraction(100)}), "n").status().code(), StatusCode::kNotFound);
  // Back again: the booking it kept still counts.
  ledger->SetNode("n", Inventory("n", 1, "A100-80GB"));
  EXPECT_TRUE(Fits(*ledger, Pod({Fraction(500)}), "n"));
  EXPECT_FALSE(Fits(*ledger, Pod({Fraction(501)}), "n"));
}

TEST(LedgerTest, EvaluateScoresEveryNodeInOrder) {
  auto ledger = NewLedger();
  ledger->SetNode("empty", Inventory("empty", 2, "A100-80GB"));
  ledger->SetNode("busy", Inventory("busy", 2, "A100-80GB"));
  Place(*ledger, "ns/a", Pod({Whole(2)}), "busy");
  std::vector<Ledger::Verdict> v =
      ledger->Evaluate(Pod({Fraction(500)}), {"busy", "ghost", "empty"});
  ASSERT_EQ(v.size(), 3u);
  EXPECT_FALSE(v[0].fits);
  EXPECT_FALSE(v[1].fits);
  EXPECT_TRUE(v[2].fits);
}

TEST(LedgerTest, UnknownPolicyIsRefused) {
  StatusOr<std::unique_ptr<Ledger>> l = Ledger::Create({.policy = "no-such-policy"});
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), StatusCode::kInvalidArgument);
  for (const char* p : {"gpufrac", "bestfit", "fgd"}) {
    EXPECT_TRUE(Ledger::Create({.policy = p}).ok()) << p;
  }
}

// ---- At scale ----

TEST(LedgerTest, ThreeHundredRandomPodsOnFourHundredGpusNeverOverbook) {
  auto ledger = NewLedger();
  std::vector<std::string> nodes;
  std::map<std::string, NodeInventory> inventories;
  for (int n = 0; n < 50; ++n) {
    std::string name = "node-" + std::to_string(n);
    NodeInventory inv = Inventory(name, 8, n % 3 == 0 ? "H100-80GB" : "A100-80GB");
    ledger->SetNode(name, inv);
    inventories[name] = inv;
    nodes.push_back(name);
  }
  std::mt19937 rng(20240607);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int placed = 0, refused = 0;
  for (int i = 0; i < 300; ++i) {
    std::vector<ContainerRequest> containers;
    int n_containers = pick(1, 10) == 1 ? 2 : 1;
    for (int c = 0; c < n_containers; ++c) {
      std::string name = "c" + std::to_string(c);
      switch (pick(0, 3)) {
        case 0:
          containers.push_back(Fraction(static_cast<uint32_t>(pick(1, 9) * 100), name));
          break;
        case 1:
          containers.push_back(Memory(static_cast<uint64_t>(pick(2, 40)) * kGiB, name));
          break;
        case 2: {
          ContainerRequest r =
              Whole(static_cast<uint32_t>(std::vector<int>{1, 2, 4}[pick(0, 2)]), name);
          containers.push_back(r);
          break;
        }
        default: {
          ContainerRequest r = Fraction(static_cast<uint32_t>(pick(1, 4) * 250), name);
          if (r.request.fraction_milli >= 1000) r = Whole(1, name);
          r.request.gpu_model = pick(0, 1) ? "H100-80GB" : "A100-80GB";
          containers.push_back(r);
        }
      }
    }
    PodRequest request = Pod(containers);
    std::vector<Ledger::Verdict> v = ledger->Evaluate(request, nodes);
    int best = -1;
    for (size_t k = 0; k < v.size(); ++k) {
      if (v[k].fits && (best < 0 || v[k].score > v[best].score)) best = static_cast<int>(k);
    }
    if (best < 0) {
      ++refused;
      continue;
    }
    StatusOr<Assignment> a = ledger->Choose(request, nodes[best]);
    ASSERT_TRUE(a.ok()) << "Evaluate said it fits but Choose refused: " << a.status();
    ASSERT_EQ(a->containers.size(), containers.size());
    for (size_t c = 0; c < containers.size(); ++c) {
      EXPECT_EQ(a->containers[c].container, containers[c].container);
      const GpuRequest& asked = containers[c].request;
      EXPECT_EQ(a->containers[c].gpus.size(), asked.gpus);
      for (const GpuGrant& g : a->containers[c].gpus) {
        if (asked.kind == GpuRequest::Kind::kFraction) {
          EXPECT_EQ(g.milli, asked.fraction_milli);
        }
        if (asked.kind == GpuRequest::Kind::kWholeGpus) {
          EXPECT_EQ(g.milli, 1000u);
        }
        if (asked.kind == GpuRequest::Kind::kMemory) {
          EXPECT_EQ(g.memory_bytes, asked.memory_bytes);
        }
      }
    }
    ledger->Book("ns/pod-" + std::to_string(i), *a);
    ++placed;
  }
  EXPECT_GT(placed, 150);
  EXPECT_EQ(placed + refused, 300);
  EXPECT_EQ(ledger->booking_count(), static_cast<size_t>(placed));

  // Add up every GPU's bookings from the assignments themselves.
  std::map<std::pair<std::string, int>, uint64_t> milli, memory;
  for (int i = 0; i < 300; ++i) {
    std::optional<Assignment> a = ledger->BookingOf("ns/pod-" + std::to_string(i));
    if (!a) continue;
    for (const ContainerAssignment& c : a->containers) {
      std::set<int> seen;
      for (const GpuGrant& g : c.gpus) {
        EXPECT_TRUE(seen.insert(g.index).second) << "a container got GPU " << g.index << " twice";
        EXPECT_EQ(g.uuid, inventories[a->node].gpus[g.index].uuid);
        milli[{a->node, g.index}] += g.milli;
        memory[{a->node, g.index}] += g.memory_bytes;
      }
    }
  }
  for (const auto& [gpu, m] : milli) {
    EXPECT_LE(m, 1000u) << gpu.first << " GPU " << gpu.second;
    EXPECT_LE(memory[gpu], inventories[gpu.first].gpus[gpu.second].memory_bytes)
        << gpu.first << " GPU " << gpu.second;
  }
  EXPECT_THAT(ledger->Overbooked(), IsEmpty());
}

TEST(LedgerTest, RandomMigRequestsNeverOverlapOnAGpu) {
  auto ledger = NewLedger();
  std::vector<std::string> nodes;
  for (int n = 0; n < 5; ++n) {
    std::string name = "mig-" + std::to_string(n);
    ledger->SetNode(name, Inventory(name, 4, n % 2 ? "A100-40GB" : "H100-80GB", GpuMode::kMig));
    nodes.push_back(name);
  }
  std::mt19937 rng(7);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::map<std::pair<std::string, int>, std::vector<MigGrant>> on_gpu;
  int placed = 0;
  for (int i = 0; i < 120; ++i) {
    ContainerRequest r;
    switch (pick(0, 2)) {
      case 0:
        r = Mig(std::vector<std::string>{"1g.10gb", "2g.20gb", "3g.40gb"}[pick(0, 2)]);
        break;
      case 1:
        r = Memory(static_cast<uint64_t>(pick(1, 20)) * kGiB);
        break;
      default:
        r = Fraction(static_cast<uint32_t>(pick(1, 5) * 100));
    }
    std::vector<Ledger::Verdict> v = ledger->Evaluate(Pod({r}), nodes);
    int best = -1;
    for (size_t k = 0; k < v.size(); ++k) {
      if (v[k].fits && (best < 0 || v[k].score > v[best].score)) best = static_cast<int>(k);
    }
    if (best < 0) continue;
    Assignment a = Place(*ledger, "ns/m" + std::to_string(i), Pod({r}), nodes[best]);
    ASSERT_EQ(a.containers.size(), 1u);
    const GpuGrant& g = a.containers[0].gpus[0];
    ASSERT_TRUE(g.mig.has_value());
    const std::string model = best % 2 ? "A100-40GB" : "H100-80GB";
    EXPECT_TRUE(LegalStart(Profile(model, g.mig->profile), g.mig->start))
        << model << " " << g.mig->profile << " at " << g.mig->start;
    on_gpu[{a.node, g.index}].push_back(*g.mig);
    ++placed;
  }
  EXPECT_GT(placed, 20);
  for (const auto& [gpu, grants] : on_gpu) {
    for (size_t x = 0; x < grants.size(); ++x) {
      for (size_t y = x + 1; y < grants.size(); ++y) {
        bool overlap = grants[x].start < grants[y].start + grants[y].size &&
                       grants[y].start < grants[x].start + grants[x].size;
        EXPECT_FALSE(overlap) << gpu.first << " GPU " << gpu.second << ": " << grants[x].profile
                              << "@" << grants[x].start << " and " << grants[y].profile << "@"
                              << grants[y].start;
      }
    }
  }
}

}  // namespace
}  // namespace gpufrac::k8s
