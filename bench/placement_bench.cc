// Speed of the placement engine (not a test): one seed of the openb default trace under the FGD
// protocol, and a synthetic cluster of 10,000 nodes receiving 100,000 pods, one thread each.
// The nodes and pods of the synthetic cluster are drawn with replacement from the openb node
// list and default pod list, so the mix of shapes is a real one. Run bench/run_placement_bench.sh.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/random.h"
#include "sim/openb_protocol.h"
#include "sim/openb_trace.h"

namespace gpufrac::sim {
namespace {

struct Trace {
  NodeList nodes;
  PodList pods;
};

const Trace& Default() {
  static const Trace trace = [] {
    std::string dir = GPUFRAC_OPENB_DIR;
    if (const char* env = std::getenv("GPUFRAC_OPENB_DIR")) dir = env;
    StatusOr<NodeList> nodes = ReadOpenbNodes(dir + "/openb_node_list_gpu_node.csv");
    if (!nodes.ok()) {
      std::fprintf(stderr, "%s\n", nodes.status().ToString().c_str());
      std::exit(2);
    }
    StatusOr<PodList> pods = ReadOpenbPods(dir + "/openb_pod_list_default.csv", nodes->models);
    if (!pods.ok()) {
      std::fprintf(stderr, "%s\n", pods.status().ToString().c_str());
      std::exit(2);
    }
    return Trace{std::move(*nodes), std::move(*pods)};
  }();
  return trace;
}

const Trace& Synthetic() {
  static const Trace trace = [] {
    const Trace& base = Default();
    Trace t;
    t.nodes.models = base.nodes.models;
    Random random(2023);
    for (int i = 0; i < 10000; ++i) {
      placement::NodeSpec n = base.nodes.nodes[random.Uniform(base.nodes.nodes.size())];
      n.name = "synthetic-" + std::to_string(i);
      t.nodes.nodes.push_back(n);
    }
    for (int i = 0; i < 100000; ++i) {
      t.pods.pods.push_back(base.pods.pods[random.Uniform(base.pods.pods.size())]);
    }
    return t;
  }();
  return trace;
}

void Run(benchmark::State& state, const Trace& trace, const char* policy, double load) {
  uint64_t pods = 0, failed = 0;
  for (auto _ : state) {
    StatusOr<OpenbRunResult> r = RunOpenb(trace.nodes, trace.pods, {policy, 42, load});
    if (!r.ok()) {
      state.SkipWithError(r.status().ToString().c_str());
      return;
    }
    pods = r->pods_total;
    failed = r->pods_failed;
  }
  state.counters["pods"] = static_cast<double>(pods);
  state.counters["failed"] = static_cast<double>(failed);
}

void BM_OpenbDefaultSeed(benchmark::State& state, const char* policy) {
  Run(state, Default(), policy, 1.3);
}
void BM_Synthetic10kNodes100kPods(benchmark::State& state, const char* policy) {
  Run(state, Synthetic(), policy, 0);
}

#define GPUFRAC_PLACEMENT_BENCH(policy)                                                   \
  BENCHMARK_CAPTURE(BM_OpenbDefaultSeed, policy, #policy)->Unit(benchmark::kMillisecond); \
  BENCHMARK_CAPTURE(BM_Synthetic10kNodes100kPods, policy, #policy)                        \
      ->Unit(benchmark::kMillisecond)                                                     \
      ->Iterations(1)

GPUFRAC_PLACEMENT_BENCH(bestfit);
GPUFRAC_PLACEMENT_BENCH(fgd);
GPUFRAC_PLACEMENT_BENCH(gpufrac);

}  // namespace
}  // namespace gpufrac::sim

BENCHMARK_MAIN();
