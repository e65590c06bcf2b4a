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

// The pods in the order they arrive, and each one's arrival time (its creation time over the
// speedup).
Status ArrivalOrder(const PodList& pods, double speedup, std::vector<uint32_t>* arrivals,
                    std::vector<int64_t>* arrival_time) {
  arrivals->resize(pods.pods.size());
  arrival_time->resize(pods.pods.size());
  // Keeps every time the loop computes (arrival + waits + runtime) far from int64 overflow.
  constexpr double kMaxSeconds = 1e15;
  for (uint32_t i = 0; i < arrivals->size(); ++i) {
    const TracePod& p = pods.pods[i];
    double at = static_cast<double>(p.creation_time) / speedup;
    if (!(at + static_cast<double>(p.deletion_time - p.creation_time) <= kMaxSeconds)) {
      return InvalidArgumentError("pod " + p.name + " would end after 10^15 s at --speedup " +
                                  std::to_string(speedup) + "; use a larger speedup");
    }
    (*arrivals)[i] = i;
    (*arrival_time)[i] = std::llround(at);
  }
  std::stable_sort(arrivals->begin(), arrivals->end(),
                   [&](uint32_t a, uint32_t b) { return (*arrival_time)[a] < (*arrival_time)[b]; });
  return OkStatus();
}

// The event loop over the pods' arrivals and departures: what runs, what waits, and the
// integral of the GPU share allocated.
class TimedLoop {
 public:
  TimedLoop(Replay& replay, const PodList& pods, std::vector<uint32_t> arrivals,
            std::vector<int64_t> arrival_time, TimedRunResult* result)
      : cluster_(replay.cluster()),
        scheduler_(replay.scheduler()),
        requests_(replay.requests()),
        pods_(pods),
        arrivals_(std::move(arrivals)),
        arrival_time_(std::move(arrival_time)),
        result_(*result) {
    waits_.reserve(arrivals_.size());
    first_time_ = arrivals_.empty() ? 0 : arrival_time_[arrivals_.front()];
    last_arrival_ = arrivals_.empty() ? 0 : arrival_time_[arrivals_.back()];
    now_ = first_time_;
  }

  // Until every pod has arrived and every placed pod has left.
  void Run(const ProgressFn& progress) {
    size_t next = 0;
    while (next < arrivals_.size() || !running_.empty()) {
      int64_t t = next < arrivals_.size() ? arrival_time_[arrivals_[next]] : INT64_MAX;
      if (!running_.empty()) t = std::min(t, running_.top().time);
      AdvanceTo(t);
      if (ReleaseDepartures(t) && !queue_.empty()) RetryQueue();
      while (next < arrivals_.size() && arrival_time_[arrivals_[next]] == t) {
        uint32_t pod = arrivals_[next++];
        // Queued pods keep their turn: a newcomer may pass only those that do not fit anyway.
        if (!TryPlace(pod, t)) queue_.push_back(pod);
        if (progress && next % 1024 == 0) progress(next, arrivals_.size());
      }
      result_.max_queue = std::max<uint64_t>(result_.max_queue, queue_.size());
    }
    if (progress) progress(arrivals_.size(), arrivals_.size());
  }

  // The result's counts, waits and time-averaged allocation, once Run has returned.
  void Summarize(uint64_t capacity) {
    result_.pods_placed = waits_.size();
    result_.pods_never_placed = queue_.size();
    if (!waits_.empty()) {
      double sum = 0;
      for (double w : waits_) sum += w;
      result_.mean_wait_s = sum / static_cast<double>(waits_.size());
      size_t k = static_cast<size_t>(std::ceil(0.99 * static_cast<double>(waits_.size()))) - 1;
      std::nth_element(waits_.begin(), waits_.begin() + static_cast<std::ptrdiff_t>(k),
                       waits_.end());
      result_.p99_wait_s = waits_[k];
    }
    double span = static_cast<double>(last_arrival_ - first_time_);
    result_.time_avg_allocated_pct =
        span > 0 ? 100.0 * allocated_integral_ / (static_cast<double>(capacity) * span) : NAN;
  }

 private:
  bool TryPlace(uint32_t pod, int64_t at) {
    std::optional<Placement> p = scheduler_.Place(requests_[pod]);
    if (!p) return false;
    const TracePod& tp = pods_.pods[pod];
    running_.push({at + (tp.deletion_time - tp.creation_time), pod, *p});
    double wait = static_cast<double>(at - arrival_time_[pod]);
    waits_.push_back(wait);
    result_.pods_waited += wait > 0;
    return true;
  }

  // The average covers the arrival window, while the trace loads the cluster; after the last
  // arrival the cluster only drains.
  void AdvanceTo(int64_t t) {
    int64_t until = std::min(t, last_arrival_);
    if (until > now_) {
      allocated_integral_ +=
          static_cast<double>(cluster_.GpuMilliAllocated()) * static_cast<double>(until - now_);
    }
    now_ = t;
  }

  // Releases the pods that leave at `t`; whether any did.
  bool ReleaseDepartures(int64_t t) {
    bool freed = false;
    while (!running_.empty() && running_.top().time == t) {
      scheduler_.Release(running_.top().placement, requests_[running_.top().pod]);
      running_.pop();
      freed = true;
    }
    return freed;
  }

  void RetryQueue() {
    std::unordered_set<Request, placement::RequestHash> failed;
    std::deque<uint32_t> still;
    for (uint32_t pod : queue_) {
      if (failed.count(requests_[pod]) || !TryPlace(pod, now_)) {
        failed.insert(requests_[pod]);
        still.push_back(pod);
      }
    }
    queue_.swap(still);
  }

  placement::Cluster& cluster_;
  placement::Scheduler& scheduler_;
  const std::vector<Request>& requests_;
  const PodList& pods_;
  const std::vector<uint32_t> arrivals_;
  const std::vector<int64_t> arrival_time_;
  TimedRunResult& result_;
  std::priority_queue<Departure, std::vector<Departure>, std::greater<>> running_;
  std::deque<uint32_t> queue_;
  std::vector<double> waits_;
  double allocated_integral_ = 0;  // GPU thousandths x seconds.
  int64_t first_time_ = 0;
  int64_t last_arrival_ = 0;
  int64_t now_ = 0;
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
  uint64_t capacity = replay->cluster().GpuMilliCapacity();

  if (!(speedup > 0)) return InvalidArgumentError("--speedup must be above 0");
  std::vector<uint32_t> arrivals;
  std::vector<int64_t> arrival_time;
  GPUFRAC_RETURN_IF_ERROR(ArrivalOrder(pods, speedup, &arrivals, &arrival_time));

  TimedRunResult result;
  result.policy = policy_name;
  result.seed = seed;
  result.pods_total = arrivals.size();
  TimedLoop loop(*replay, pods, std::move(arrivals), std::move(arrival_time), &result);
  auto start = std::chrono::steady_clock::now();
  loop.Run(progress);
  result.elapsed_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  loop.Summarize(capacity);
  return result;
}

}  // namespace gpufrac::sim
