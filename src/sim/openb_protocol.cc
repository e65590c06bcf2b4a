// One seed of the openb protocol. The seed drives one random sequence used in a fixed order
// (shuffle, then resampling, then node ranking, then the policy's own draws), so a seed always
// names the same run.
#include "sim/openb_protocol.h"

#include <cmath>

#include "common/random.h"
#include "sim/replay.h"

namespace gpufrac::sim {

using placement::Request;

namespace {

// Resampling stops here whatever the load: a run is for people to wait on.
constexpr size_t kMaxPods = 50'000'000;

// Steps 1 and 2: the order in which pods arrive, as indices into the trace.
std::vector<uint32_t> ArrivalOrder(const PodList& pods, uint64_t capacity_milli, double load,
                                   Random& random) {
  size_t n = pods.pods.size();
  std::vector<uint32_t> order(n);
  uint64_t total = 0;
  for (uint32_t i = 0; i < n; ++i) {
    order[i] = i;
    total += pods.pods[i].request.TotalGpuMilli();
  }
  random.Shuffle(order);
  if (load <= 0) return order;
  double target = load * static_cast<double>(capacity_milli);
  if (static_cast<double>(total) < target) {
    while (order.size() < kMaxPods) {
      uint32_t pick = static_cast<uint32_t>(random.Uniform(n));
      uint64_t request = pods.pods[pick].request.TotalGpuMilli();
      if (static_cast<double>(total + request) > target) break;
      order.push_back(pick);
      total += request;
    }
  } else {
    while (static_cast<double>(total) > target && !order.empty()) {
      size_t victim = random.Uniform(order.size());
      total -= pods.pods[order[victim]].request.TotalGpuMilli();
      order.erase(order.begin() + static_cast<std::ptrdiff_t>(victim));
    }
  }
  return order;
}

}  // namespace

StatusOr<OpenbRunResult> RunOpenb(const NodeList& nodes, const PodList& pods,
                                  const OpenbRunOptions& options, const ProgressFn& progress) {
  GPUFRAC_ASSIGN_OR_RETURN(std::unique_ptr<Replay> replay, Replay::Create(nodes, pods));
  placement::Cluster& cluster = replay->cluster();
  const std::vector<Request>& requests = replay->requests();
  uint64_t capacity = cluster.GpuMilliCapacity();
  uint64_t demand = 0;
  for (const Request& r : requests) demand += r.TotalGpuMilli();
  if (demand == 0 && options.load > 0) {
    return InvalidArgumentError(
        "the pods ask for no GPUs, so there is no GPU demand to resample up to; use --load 0");
  }
  Random random(options.seed);
  std::vector<uint32_t> order = ArrivalOrder(pods, capacity, options.load, random);
  GPUFRAC_RETURN_IF_ERROR(replay->Start(options.policy, random));
  placement::Scheduler& scheduler = replay->scheduler();

  OpenbRunResult result;
  result.policy = options.policy;
  result.seed = options.seed;
  result.pods_total = order.size();
  uint64_t arrived = 0;
  auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < order.size(); ++i) {
    const Request& r = requests[order[i]];
    arrived += r.TotalGpuMilli();
    if (!scheduler.Place(r)) {
      ++result.pods_failed;
      result.gpu_pods_failed += r.gpu_count > 0;
    }
    result.curve.Record(arrived, cluster.GpuMilliAllocated(), capacity);
    if (progress && (i + 1) % 1024 == 0) progress(i + 1, order.size());
  }
  result.elapsed_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (progress) progress(order.size(), order.size());

  std::optional<double> at_100 = result.curve.AllocatedAt(100);
  result.unallocated_gpu_pct_at_100 = at_100 ? 100 - *at_100 : NAN;
  result.allocated_pct_final =
      100.0 * static_cast<double>(cluster.GpuMilliAllocated()) / static_cast<double>(capacity);
  result.arrived_pct_final = 100.0 * static_cast<double>(arrived) / static_cast<double>(capacity);
  return result;
}

}  // namespace gpufrac::sim
