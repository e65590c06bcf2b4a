// The timed replay's event loop. At one instant, departures come first, then the queue is
// retried, then new arrivals are tried. Placing only takes capacity, so within one retry pass a
// kind of request that failed once fails again and is skipped: a pass tries one placement per
// kind queued (plus one per pod placed) and costs a hash lookup for every other queued pod.
#include "sim/timed_replay.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <queue>
#include <unordered_set>

#include "common/random.h"
#include "sim/replay.h"

namespace gpufrac::sim {

using placement::Placement;
using placement::Request;

namespace {

struct Departure {
  int64_t time;
  uint32_t pod;
  Placement placement;
  bool operator>(const Departure& o) const { return time > o.time; }
};

}  // namespace

StatusOr<TimedRunResult> RunTimed(const NodeList& nodes, const PodList& pods,
                                  const std::string& policy_name, uint64_t seed, double speedup,
                                  const ProgressFn& progress) {
  if (!pods.has_times) {
    return InvalidArgumentError(
        "--timed needs creation_time and deletion_time columns, and this pod list has none");
  }
  GPUFRAC_ASSIGN_OR_RETURN(std::unique_ptr<Replay> replay, Replay::Create(nodes, pods));
  Random random(seed);
  GPUFRAC_RETURN_IF_ERROR(replay->Start(policy_name, random));
  placement::Cluster& cluster = replay->cluster();
  const std::vector<Request>& requests = replay->requests();
  placement::Scheduler& scheduler = replay->scheduler();
  uint64_t capacity = cluster.GpuMilliCapacity();

  if (!(speedup > 0)) return InvalidArgumentError("--speedup must be above 0");
  std::vector<uint32_t> arrivals(pods.pods.size());
  std::vector<int64_t> arrival_time(pods.pods.size());
  // Keeps every time the loop computes (arrival + waits + runtime) far from int64 overflow.
  constexpr double kMaxSeconds = 1e15;
  for (uint32_t i = 0; i < arrivals.size(); ++i) {
    const TracePod& p = pods.pods[i];
    double at = static_cast<double>(p.creation_time) / speedup;
    if (!(at + static_cast<double>(p.deletion_time - p.creation_time) <= kMaxSeconds)) {
      return InvalidArgumentError("pod " + p.name + " would end after 10^15 s at --speedup " +
                                  std::to_string(speedup) + "; use a larger speedup");
    }
    arrivals[i] = i;
    arrival_time[i] = std::llround(at);
  }
  std::stable_sort(arrivals.begin(), arrivals.end(),
                   [&](uint32_t a, uint32_t b) { return arrival_time[a] < arrival_time[b]; });

  TimedRunResult result;
  result.policy = policy_name;
  result.seed = seed;
  result.pods_total = arrivals.size();
  std::priority_queue<Departure, std::vector<Departure>, std::greater<>> running;
  std::deque<uint32_t> queue;
  std::vector<double> waits;
  waits.reserve(arrivals.size());
  double allocated_integral = 0;  // GPU thousandths x seconds.
  int64_t first_time = arrivals.empty() ? 0 : arrival_time[arrivals.front()];
  int64_t now = first_time;

  auto try_place = [&](uint32_t pod, int64_t at) {
    std::optional<Placement> p = scheduler.Place(requests[pod]);
    if (!p) return false;
    const TracePod& tp = pods.pods[pod];
    running.push({at + (tp.deletion_time - tp.creation_time), pod, *p});
    double wait = static_cast<double>(at - arrival_time[pod]);
    waits.push_back(wait);
    result.pods_waited += wait > 0;
    return true;
  };
  // The average covers the arrival window, while the trace loads the cluster; after the last
  // arrival the cluster only drains.
  int64_t last_arrival = arrivals.empty() ? 0 : arrival_time[arrivals.back()];
  auto advance_to = [&](int64_t t) {
    int64_t until = std::min(t, last_arrival);
    if (until > now) {
      allocated_integral +=
          static_cast<double>(cluster.GpuMilliAllocated()) * static_cast<double>(until - now);
    }
    now = t;
  };
  auto retry_queue = [&] {
    std::unordered_set<Request, placement::RequestHash> failed;
    std::deque<uint32_t> still;
    for (uint32_t pod : queue) {
      if (failed.count(requests[pod]) || !try_place(pod, now)) {
        failed.insert(requests[pod]);
        still.push_back(pod);
      }
    }
    queue.swap(still);
  };

  auto start = std::chrono::steady_clock::now();
  size_t next = 0;
  while (next < arrivals.size() || !running.empty()) {
    int64_t t = next < arrivals.size() ? arrival_time[arrivals[next]] : INT64_MAX;
    if (!running.empty()) t = std::min(t, running.top().time);
    advance_to(t);
    bool freed = false;
    while (!running.empty() && running.top().time == t) {
      scheduler.Release(running.top().placement, requests[running.top().pod]);
      running.pop();
      freed = true;
    }
    if (freed && !queue.empty()) retry_queue();
    while (next < arrivals.size() && arrival_time[arrivals[next]] == t) {
      uint32_t pod = arrivals[next++];
      // Queued pods keep their turn: a newcomer may pass only those that do not fit anyway.
      if (!try_place(pod, t)) queue.push_back(pod);
      if (progress && next % 1024 == 0) progress(next, arrivals.size());
    }
    result.max_queue = std::max<uint64_t>(result.max_queue, queue.size());
  }
  if (progress) progress(arrivals.size(), arrivals.size());
  result.elapsed_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  result.pods_placed = waits.size();
  result.pods_never_placed = queue.size();
  if (!waits.empty()) {
    double sum = 0;
    for (double w : waits) sum += w;
    result.mean_wait_s = sum / static_cast<double>(waits.size());
    size_t k = static_cast<size_t>(std::ceil(0.99 * static_cast<double>(waits.size()))) - 1;
    std::nth_element(waits.begin(), waits.begin() + static_cast<std::ptrdiff_t>(k), waits.end());
    result.p99_wait_s = waits[k];
  }
  double span = static_cast<double>(last_arrival - first_time);
  result.time_avg_allocated_pct =
      span > 0 ? 100.0 * allocated_integral / (static_cast<double>(capacity) * span) : NAN;
  return result;
}

}  // namespace gpufrac::sim
