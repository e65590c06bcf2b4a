// The scheduler extender benchmark of issue 6 (not a test): latency of filter + prioritize for
// one pod against 5,000 nodes of 8 GPUs each, through the full JSON path kube-scheduler uses
// (ExtenderArgs with NodeNames in, ExtenderFilterResult / HostPriorityList out), while pods are
// bound and finish between calls so that the books really change. Prints a markdown table.
// Run bench/run_k8s_bench.sh, which writes docs/k8s-extender-benchmark.md.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/random.h"
#include "gpu/catalogue.h"
#include "k8s/extender.h"
#include "k8s/ledger.h"

namespace gpufrac::k8s {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// The extender only calls the API server from Bind and for events on invalid pods.
class NoApi : public ClusterApi {
 public:
  StatusOr<json> GetPod(const std::string&, const std::string&) override { return Nope(); }
  StatusOr<std::vector<json>> ListPodsOnNode(const std::string&) override { return Nope(); }
  Status AnnotatePod(const std::string&, const std::string&, const std::string&,
                     const std::vector<std::pair<std::string, std::string>>&) override {
    return Nope();
  }
  Status BindPod(const std::string&, const std::string&, const std::string&,
                 const std::string&) override {
    return Nope();
  }
  StatusOr<json> GetNode(const std::string&) override { return Nope(); }
  Status AnnotateNode(const std::string&, const std::string&,
                      const std::vector<std::pair<std::string, std::string>>&) override {
    return Nope();
  }
  StatusOr<json> GetNamespace(const std::string&) override { return Nope(); }
  void PodEvent(const json&, const std::string&, const std::string&, bool) override {}
  StatusOr<json> CreatePod(const std::string&, const json&) override { return Nope(); }
  Status DeletePod(const std::string&, const std::string&, const std::string&) override {
    return Nope();
  }
  StatusOr<std::vector<json>> ListPods(const std::string&, const std::string&) override {
    return Nope();
  }

 private:
  static Status Nope() { return UnavailableError("no API server in the benchmark"); }
};

struct Options {
  int nodes = 5000;
  int gpus = 8;
  int pods = 400;         // Measured filter + prioritize calls.
  double fill = 0.6;      // Share of GPU capacity booked before measuring.
  uint64_t seed = 1;
};

json NodeObject(const std::string& name, int gpus) {
  NodeInventory inventory;
  inventory.slots_per_gpu = 10;
  const gpu::GpuModel* h100 = gpu::FindModel("H100-80GB");
  for (int i = 0; i < gpus; ++i) {
    inventory.gpus.push_back({.index = i,
                              .uuid = "GPU-" + name + "-" + std::to_string(i),
                              .model = "H100-80GB",
                              .memory_bytes = h100 != nullptr ? h100->memory_bytes : 80ull << 30,
                              .mode = GpuMode::kShared,
                              .healthy = true,
                              .mig = {}});
  }
  return {{"metadata",
           {{"name", name},
            {"annotations", {{std::string(kAnnotationInventory), InventoryToJson(inventory).dump()}}}}}};
}

// A pod as kube-scheduler sends it: realistic metadata and one container with gpufrac resources.
json PodObject(int id, const std::string& kind) {
  json resources = json::object();
  if (kind == "whole1") {
    resources = {{"gpufrac.io/gpu", "1"}};
  } else if (kind == "whole2") {
    resources = {{"gpufrac.io/gpu", "2"}};
  } else if (kind == "mem10g") {
    resources = {{"gpufrac.io/gpu", "1"}, {"gpufrac.io/gpu-memory", "10240"}};
  } else {
    resources = {{"gpufrac.io/gpu", "1"}, {"gpufrac.io/gpu-fraction", kind}};
  }
  resources["cpu"] = "4";
  resources["memory"] = "16Gi";
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata",
           {{"name", "train-" + std::to_string(id)},
            {"namespace", "research"},
            {"uid", "5f8c1f2e-0000-4000-8000-" + std::to_string(100000000000 + id)},
            {"resourceVersion", std::to_string(1000 + id)},
            {"labels", {{"app", "train"}, {"team", "vision"}}}}},
          {"spec",
           {{"schedulerName", "default-scheduler"},
            {"containers",
             {{{"name", "main"},
               {"image", "nvcr.io/nvidia/pytorch:24.05-py3"},
               {"command", {"python", "train.py"}},
               {"resources", {{"limits", resources}, {"requests", resources}}}}}}}},
          {"status", {{"phase", "Pending"}}}};
}

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p * (v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

// The pods' kinds: GPU shares in thousandths, a memory amount, whole GPUs.
const std::vector<std::string>& PodKinds() {
  static const auto* kinds =
      new std::vector<std::string>{"100", "250", "250", "500", "mem10g", "whole1", "whole2"};
  return *kinds;
}

// What the measured calls run against, and what they leave booked.
struct Books {
  Ledger* ledger;
  Extender* extender;
  json names = json::array();     // the nodes'
  std::vector<std::string> live = {};  // keys of the pods booked
  int next_id = 0;
};

// Adds the nodes, each with `o.gpus` GPUs.
void AddNodes(const Options& o, Books& books) {
  for (int n = 0; n < o.nodes; ++n) {
    char name[32];
    std::snprintf(name, sizeof(name), "gpu-node-%05d", n);
    books.extender->OnNode(NodeObject(name, o.gpus));
    books.names.push_back(name);
  }
}

// Fills the nodes to `o.fill` by booking pods where the ledger itself would put them on a random
// node; the seconds it took.
double FillBooks(const Options& o, Books& books, Random& rng) {
  const std::vector<std::string>& kinds = PodKinds();
  const double capacity = static_cast<double>(o.nodes) * o.gpus * 1000;
  double booked = 0;
  auto t_fill = Clock::now();
  while (booked < o.fill * capacity) {
    int id = books.next_id++;
    json pod = PodObject(id, kinds[rng.Uniform(kinds.size())]);
    StatusOr<PodRequest> request = ParsePodRequest(pod);
    std::string node = books.names[rng.Uniform(o.nodes)].get<std::string>();
    StatusOr<Assignment> a = books.ledger->Choose(*request, node);
    if (!a.ok()) continue;
    for (const ContainerAssignment& c : a->containers) {
      for (const GpuGrant& g : c.gpus) booked += g.milli;
    }
    std::string key = "research/train-" + std::to_string(id);
    books.ledger->Book(key, *a);
    books.live.push_back(key);
  }
  return std::chrono::duration<double>(Clock::now() - t_fill).count();
}

// The measured calls' times, in milliseconds (the first call apart: it scores every node anew).
struct Timings {
  std::vector<double> filter_ms, prioritize_ms, total_ms;
  double first_ms = 0;
  int unschedulable = 0;
};

// Binds the pod where the scores say (what kube-scheduler would do), and lets an older pod
// finish, so that the next call sees changed nodes. False if no node could take the pod.
bool BindAndChurn(Books& books, Random& rng, const json& pod, int id, const std::string& scores) {
  json list = json::parse(scores);
  if (list.empty()) return false;
  auto best = std::max_element(list.begin(), list.end(), [](const json& a, const json& b) {
    return a["Score"].get<int64_t>() < b["Score"].get<int64_t>();
  });
  StatusOr<PodRequest> request = ParsePodRequest(pod);
  StatusOr<Assignment> a = books.ledger->Choose(*request, (*best)["Host"].get<std::string>());
  if (a.ok()) {
    std::string key = "research/train-" + std::to_string(id);
    books.ledger->Book(key, *a);
    books.live.push_back(key);
  }
  size_t gone = rng.Uniform(books.live.size());
  books.ledger->Unbook(books.live[gone]);
  books.live[gone] = books.live.back();
  books.live.pop_back();
  return true;
}

// Times filter and prioritize for `o.pods` pods, binding each as it goes.
Timings MeasurePods(const Options& o, Books& books, Random& rng) {
  const std::vector<std::string>& kinds = PodKinds();
  Timings t;
  for (int i = 0; i < o.pods; ++i) {
    int id = books.next_id++;
    json pod = PodObject(id, kinds[i % kinds.size()]);
    std::string body = json{{"Pod", pod}, {"Nodes", nullptr}, {"NodeNames", books.names}}.dump();
    auto t0 = Clock::now();
    std::string filtered = books.extender->Filter(body);
    auto t1 = Clock::now();
    // kube-scheduler sends prioritize only the nodes that passed every filter.
    json result = json::parse(filtered);
    json passed = result["NodeNames"];
    std::string body2 = json{{"Pod", pod}, {"Nodes", nullptr}, {"NodeNames", passed}}.dump();
    auto t2 = Clock::now();
    std::string scores = books.extender->Prioritize(body2);
    auto t3 = Clock::now();
    double f = std::chrono::duration<double, std::milli>(t1 - t0).count();
    double p = std::chrono::duration<double, std::milli>(t3 - t2).count();
    if (i == 0) {
      t.first_ms = f + p;
    } else {
      t.filter_ms.push_back(f);
      t.prioritize_ms.push_back(p);
      t.total_ms.push_back(f + p);
    }
    if (!BindAndChurn(books, rng, pod, id, scores)) ++t.unschedulable;
  }
  return t;
}

void PrintTimings(const Options& o, size_t live, const Timings& t, double fill_s) {
  std::printf("| nodes x GPUs | pods booked before | measured pods | call | p50 | p90 | p99 | max |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  auto row = [&](const char* what, const std::vector<double>& v) {
    std::printf("| %d x %d | %zu | %zu | %s | %.2f ms | %.2f ms | %.2f ms | %.2f ms |\n", o.nodes,
                o.gpus, live, v.size(), what, Percentile(v, 0.5), Percentile(v, 0.9),
                Percentile(v, 0.99), Percentile(v, 1.0));
  };
  row("filter", t.filter_ms);
  row("prioritize", t.prioritize_ms);
  row("filter + prioritize", t.total_ms);
  std::printf("\nFirst call after start (every node scored for the first time): %.1f ms. "
              "Filling the books: %.1f s. Pods no node could take: %d.\n",
              t.first_ms, fill_s, t.unschedulable);
}

int Run(const Options& o) {
  auto ledger = Ledger::Create();
  if (!ledger.ok()) {
    std::fprintf(stderr, "%s\n", ledger.status().ToString().c_str());
    return 1;
  }
  NoApi api;
  Extender extender(ledger->get(), &api);
  Books books{.ledger = ledger->get(), .extender = &extender};
  AddNodes(o, books);
  Random rng(o.seed);
  const double fill_s = FillBooks(o, books, rng);
  const Timings timings = MeasurePods(o, books, rng);
  PrintTimings(o, books.live.size(), timings, fill_s);
  return 0;
}

}  // namespace
}  // namespace gpufrac::k8s

int main(int argc, char** argv) {
  gpufrac::k8s::Options o;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](const char* flag) -> const char* {
      size_t n = std::strlen(flag);
      return arg.compare(0, n, flag) == 0 ? argv[i] + n : nullptr;
    };
    if (const char* v = value("--nodes=")) {
      o.nodes = std::atoi(v);
    } else if (const char* v = value("--gpus=")) {
      o.gpus = std::atoi(v);
    } else if (const char* v = value("--pods=")) {
      o.pods = std::atoi(v);
    } else if (const char* v = value("--fill=")) {
      o.fill = std::atof(v);
    } else if (const char* v = value("--seed=")) {
      o.seed = std::strtoull(v, nullptr, 10);
    } else {
      std::fprintf(stderr,
                   "usage: k8s_extender_bench [--nodes=5000] [--gpus=8] [--pods=400] "
                   "[--fill=0.6] [--seed=1]\n");
      return 2;
    }
  }
  if (o.nodes <= 0 || o.gpus <= 0 || o.gpus > 32 || o.pods < 2) {
    std::fprintf(stderr, "k8s_extender_bench: --nodes > 0, --gpus 1..32, --pods >= 2\n");
    return 2;
  }
  return gpufrac::k8s::Run(o);
}
